// Reads the operations API's sync bodies: the spec's three shapes (single, array, `items` envelope)
// for policies and keys, plus an optional runtimeVersion. One bad entry rejects the whole payload
// with a 400 naming the entry, so a sync is all or nothing. Records are read as sliced work
// (core/time-slices.ts): a sync of a large runtime does not hold the event loop while it is validated.
import { EngineError, errors } from '../core/errors.js';
import {
  type KeyRecord,
  type MaterialReader,
  type PolicyRecord,
  parseKeyRecord,
  parsePolicyRecord,
  runtimeVersionProblem,
} from '../core/records.js';
import type { Sliced } from '../core/time-slices.js';

export interface SyncPayload<T> {
  readonly records: T[];
  readonly runtimeVersion?: string;
}

const SHAPES = {
  policy: { single: 'policy', array: 'policies' },
  key: { single: 'key', array: 'keys' },
} as const;

/** The entries of a sync body and how each is named in errors. */
interface Entries {
  readonly list: readonly unknown[];
  readonly where: (index: number) => string;
}

function entries(kind: 'policy' | 'key', body: unknown): Entries {
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
  if (name === single) return { list: [value], where: () => single };
  if (!Array.isArray(value)) throw errors.syncInvalid(`${name} must be an array`);
  if (value.length === 0) throw errors.syncEmpty(kind);
  return { list: value, where: (i) => `${name}[${i}]` };
}

function runtimeVersionOf(body: unknown): string | undefined {
  const value = (body as Record<string, unknown>).runtimeVersion;
  if (value === undefined) return undefined;
  const problem = runtimeVersionProblem(value);
  if (problem) throw errors.syncInvalid(problem);
  return value as string;
}

function* parseAll<T>(
  { list, where }: Entries,
  parse: (raw: unknown, where: string) => T,
  id: (r: T) => string,
): Sliced<T[]> {
  const seen = new Set<string>();
  const records = new Array<T>(list.length);
  for (let i = 0; i < list.length; i++) {
    let record: T;
    try {
      record = parse(list[i], where(i));
    } catch (error) {
      // Record parse errors are execution-shaped (INVALID_REQUEST); sync errors use the plain body.
      if (error instanceof EngineError) throw errors.syncInvalid(error.message);
      throw error;
    }
    if (seen.has(id(record))) throw errors.syncInvalid(`${where(i)}: duplicate entry ${id(record)}`);
    seen.add(id(record));
    records[i] = record;
    yield;
  }
  return records;
}

/** A policy sync body's records, as sliced work. */
export function* parsePolicySync(body: unknown): Sliced<SyncPayload<PolicyRecord>> {
  const list = entries('policy', body);
  const records = yield* parseAll(list, parsePolicyRecord, (p) => p.policyCode);
  return { records, runtimeVersion: runtimeVersionOf(body) };
}

/** A key sync body's records (material read, unwrapped under the master key), as sliced work. */
export function* parseKeySync(body: unknown, readMaterial: MaterialReader): Sliced<SyncPayload<KeyRecord>> {
  const list = entries('key', body);
  const records = yield* parseAll(
    list,
    (raw, where) => parseKeyRecord(raw, where, readMaterial),
    (k) => `${k.alias} version ${k.version}`,
  );
  return { records, runtimeVersion: runtimeVersionOf(body) };
}
