// Reads the operations API's sync bodies: the spec's three shapes (single, array, `items` envelope)
// for policies and keys, plus an optional runtimeVersion. One bad entry rejects the whole payload
// with a 400 naming the entry, so a sync is all or nothing.
import { EngineError, errors } from '../core/errors.js';
import {
  type KeyRecord,
  type MaterialReader,
  type PolicyRecord,
  parseKeyRecord,
  parsePolicyRecord,
  runtimeVersionProblem,
} from '../core/records.js';

export interface SyncPayload<T> {
  readonly records: T[];
  readonly runtimeVersion?: string;
}

const SHAPES = {
  policy: { single: 'policy', array: 'policies' },
  key: { single: 'key', array: 'keys' },
} as const;

function entries(kind: 'policy' | 'key', body: unknown): { raw: unknown; where: string }[] {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw errors.syncInvalid(`${kind} sync request must be a JSON object`);
  }
  const fields = body as Record<string, unknown>;
  const { single, array } = SHAPES[kind];
  const present = [single, array, 'items'].filter((name) => fields[name] !== undefined);
  if (present.length === 0) throw errors.syncEmpty(kind);
  if (present.length > 1)
    throw errors.syncInvalid(`${kind} sync request must carry only one of ${single}, ${array}, items`);
  const name = present[0] as string;
  const value = fields[name];
  if (name === single) return [{ raw: value, where: single }];
  if (!Array.isArray(value)) throw errors.syncInvalid(`${name} must be an array`);
  if (value.length === 0) throw errors.syncEmpty(kind);
  return value.map((raw, i) => ({ raw, where: `${name}[${i}]` }));
}

function runtimeVersionOf(body: unknown): string | undefined {
  const value = (body as Record<string, unknown>).runtimeVersion;
  if (value === undefined) return undefined;
  const problem = runtimeVersionProblem(value);
  if (problem) throw errors.syncInvalid(problem);
  return value as string;
}

function parseAll<T>(
  list: { raw: unknown; where: string }[],
  parse: (raw: unknown, where: string) => T,
  id: (r: T) => string,
): T[] {
  const seen = new Set<string>();
  return list.map(({ raw, where }) => {
    let record: T;
    try {
      record = parse(raw, where);
    } catch (error) {
      // Record parse errors are execution-shaped (INVALID_REQUEST); sync errors use the plain body.
      if (error instanceof EngineError) throw errors.syncInvalid(error.message);
      throw error;
    }
    if (seen.has(id(record))) throw errors.syncInvalid(`${where}: duplicate entry ${id(record)}`);
    seen.add(id(record));
    return record;
  });
}

export function parsePolicySync(body: unknown): SyncPayload<PolicyRecord> {
  const list = entries('policy', body);
  return { records: parseAll(list, parsePolicyRecord, (p) => p.policyCode), runtimeVersion: runtimeVersionOf(body) };
}

export function parseKeySync(body: unknown, readMaterial: MaterialReader): SyncPayload<KeyRecord> {
  const list = entries('key', body);
  const records = parseAll(
    list,
    (raw, where) => parseKeyRecord(raw, where, readMaterial),
    (k) => `${k.alias} version ${k.version}`,
  );
  return { records, runtimeVersion: runtimeVersionOf(body) };
}
