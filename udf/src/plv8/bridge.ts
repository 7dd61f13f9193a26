// The plv8 side of the database bridge: the same contract as the PL/Python bridge (svc_bridge.py), with
// the `http` extension (pgsql-http) as its HTTP client. Compiled to one self-contained script that the
// generated SQL embeds in each plv8 function; the first call in a backend creates the bridge and later
// calls reuse it. It talks to PostgreSQL only through `plv8.execute`, with the statements below, which is
// also what lets the tests run it under a shim. No imports at run time: plv8 has no module loader.
// The engine address is the options of the foreign server svc_engine (the DBA's), which the bridge reads
// itself, as the owner of the functions, once per statement: the SECURITY DEFINER SQL wrapper passes `cfg` =
// [the statement's start time, svc.timeout_ms, svc.batch_size]. No function takes an address as an argument.

/** The part of plv8's API the bridge uses. */
export interface Plv8 {
  execute(sql: string, args?: readonly unknown[]): Array<Record<string, unknown>>;
}

/** Errors that reach SQL carry these SQLSTATEs (docs/sql.md). */
export const SQLSTATES = { itemFailed: 'SV001', unavailable: 'SV002', config: 'SV003' } as const;

const DEFAULT_TIMEOUT_MS = 5000;
const MAX_TIMEOUT_MS = 3_600_000;
const DEFAULT_BATCH_SIZE = 1000;
const MAX_BATCH_SIZE = 10_000;
// Characters of data per request: large values go in smaller requests so bodies stay well under the engine's limit.
const MAX_REQUEST_DATA_CHARS = 2 * 1024 * 1024;
const QUERY_CANCELED = '57014';
// The one place that holds the engine address, and the foreign-data wrapper it must be on (docs/sql.md §2).
const SERVER = 'svc_engine';
const BRIDGE_FDW = 'svc_bridge_fdw';
const SERVER_HINT =
  "CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url 'http://127.0.0.1:8080') as a superuser or the owner of the svc functions; see docs/sql.md.";
const ENGINE_CHECK_HINT =
  'Check the engine directly (GET <url of server svc_engine>/api/health and one POST /api/encrypt); if it works there, the problem is between PostgreSQL and the engine.';

/**
 * The statements the bridge executes. `@SCHEMA@` is the bridge's schema and `@HTTP@` the http
 * extension's, both substituted (quoted) by the installer, because the functions pin search_path.
 */
export const STATEMENTS = {
  prepare:
    "SELECT @HTTP@.http_set_curlopt('CURLOPT_TIMEOUT_MS', $1) AS timeout, pg_catalog.set_config('http.keepalive', 'on', true) AS keepalive",
  request:
    'SELECT status, content FROM @HTTP@.http(ROW($1, $2, ' +
    'ARRAY(SELECT @HTTP@.http_header(h->>0, h->>1) FROM pg_catalog.jsonb_array_elements($3::jsonb) AS h), $4, $5)::@HTTP@.http_request)',
  raise: 'SELECT @SCHEMA@.svc__raise($1, $2, $3, $4)',
  /** The server's foreign-data wrapper and options (name=value strings, as pg_options_to_table splits them). */
  server:
    'SELECT w.fdwname::text AS wrapper, s.srvoptions AS options FROM pg_catalog.pg_foreign_server s ' +
    'JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw WHERE s.srvname = $1',
  /**
   * The tenant id, a credential of the operations API, from the user mapping of the functions' owner (the
   * current user inside the SECURITY DEFINER wrappers); pg_user_mappings shows its options to that role only.
   */
  tenant:
    'SELECT t.option_value AS tenant_id FROM pg_catalog.pg_user_mappings m, pg_catalog.pg_options_to_table(m.umoptions) AS t ' +
    "WHERE m.srvname = $1 AND m.usename = CURRENT_USER AND t.option_name = 'tenant_id'",
} as const;

interface Settings {
  url: string;
  /** The operations API's base address: the server's ops_url, else url. */
  opsUrl: string;
  timeoutMs: number;
  batchSize: number;
}

type Op = 'encrypt' | 'decrypt' | 'rewrap';
type Item = { data: string; policyCode?: string; policyName?: string; policyVersion?: number };

interface BatchResult {
  success?: boolean;
  message?: string;
  encryptedData?: string;
  decryptedData?: string;
}

/** [the statement's start time, svc.timeout_ms, svc.batch_size]: the key of the lookup and current_setting() of the two settings. */
export type Cfg = ReadonlyArray<string | null> | null;

export interface Bridge {
  encrypt(cfg: Cfg, data: string, policyCode: string): string;
  encryptByName(cfg: Cfg, data: string, policyName: string, policyVersion: number | null): string;
  decrypt(cfg: Cfg, data: string): string;
  encryptArray(cfg: Cfg, values: ReadonlyArray<string | null> | null, policyCode: string): Array<string | null> | null;
  decryptArray(cfg: Cfg, values: ReadonlyArray<string | null> | null): Array<string | null> | null;
  rewrap(cfg: Cfg, data: string): string;
  rewrapArray(cfg: Cfg, values: ReadonlyArray<string | null> | null): Array<string | null> | null;
  arraySend(cfg: Cfg, op: string, values: ReadonlyArray<string | null> | null, policyCode: string | null): number;
  arrayCollect(cfg: Cfg, op: string, values: ReadonlyArray<string | null> | null, policyCode: string | null): Array<string | null> | null;
  equalityTerms(cfg: Cfg, data: string, policyCode: string): string[];
  health(cfg: Cfg): string;
  engineInfo(cfg: Cfg): string;
}

export function createBridge(plv8: Plv8, schema: string, httpSchema: string): Bridge {
  const sql = (text: string) => text.replace(/@SCHEMA@/g, schema).replace(/@HTTP@/g, httpSchema);
  const statements = {
    prepare: sql(STATEMENTS.prepare),
    request: sql(STATEMENTS.request),
    raise: sql(STATEMENTS.raise),
    server: STATEMENTS.server,
    tenant: STATEMENTS.tenant,
  };
  let cached: { key: string; settings: Settings } | undefined;
  // The arrays svc_array_send recorded, oldest first (two at most, as in the other bridges: the bulk
  // procedures send chunk k+1 before they collect chunk k). plv8's HTTP calls are synchronous, so nothing
  // travels ahead: the values go to the engine when svc_array_collect asks for them.
  const ahead: Array<{ op: string; policyCode: string | null; values: Array<string | null> | null }> = [];

  function fail(sqlstate: string, message: string, detail?: string, hint?: string): never {
    plv8.execute(statements.raise, [sqlstate, message, detail ?? null, hint ?? null]);
    throw new Error(message);
  }

  function integer(raw: unknown, name: string, fallback: number, max: number): number {
    if (raw === null || raw === undefined || String(raw).trim() === '') return fallback;
    const text = String(raw).trim();
    const value = /^[0-9]+$/.test(text) ? Number(text) : 0;
    if (value < 1 || value > max) fail(SQLSTATES.config, `${name} must be an integer from 1 to ${max}, got "${raw}"`);
    return value;
  }

  function address(raw: string | null | undefined, option: string): string {
    const text = typeof raw === 'string' ? raw.trim() : '';
    if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(text)) {
      fail(SQLSTATES.config, `option ${option} of the foreign server ${SERVER} must be an http:// or https:// URL without query, got "${raw}"`);
    }
    return text.replace(/\/+$/, '');
  }

  /** The settings of cfg, looked up again only in a new statement or when a setting changed. */
  function settings(cfg: Cfg): Settings {
    const key = JSON.stringify(cfg ?? null);
    if (cached?.key !== key) cached = { key, settings: lookUp(cfg) };
    return cached.settings;
  }

  function lookUp(cfg: Cfg): Settings {
    const [, timeoutMs, batchSize] = cfg ?? [];
    const row = plv8.execute(statements.server, [SERVER])[0];
    if (row === undefined) {
      fail(SQLSTATES.config, `the foreign server ${SERVER} that holds the engine address does not exist`, undefined, SERVER_HINT);
    }
    const wrapper = row.wrapper;
    if (wrapper !== BRIDGE_FDW) {
      // A server of the dblink bridge (dblink_fdw) names a PostgreSQL wire endpoint, not an HTTP one.
      fail(SQLSTATES.config, `the foreign server ${SERVER} is on the foreign-data wrapper ${String(wrapper)}, not ${BRIDGE_FDW}`, undefined, `Drop it and ${SERVER_HINT}`);
    }
    const options = new Map<string, string>();
    for (const option of (row.options as string[] | null) ?? []) {
      const at = option.indexOf('=');
      if (at > 0) options.set(option.slice(0, at), option.slice(at + 1));
    }
    const url = options.get('url');
    const opsUrl = options.get('ops_url');
    if (url === undefined || url.trim() === '') {
      fail(
        SQLSTATES.config,
        `the foreign server ${SERVER} has no option url`,
        undefined,
        "ALTER SERVER svc_engine OPTIONS (ADD url 'http://127.0.0.1:8080'); see docs/sql.md.",
      );
    }
    const base = address(url, 'url');
    return {
      url: base,
      opsUrl: opsUrl !== undefined && opsUrl.trim() !== '' ? address(opsUrl, 'ops_url') : base,
      timeoutMs: integer(timeoutMs, 'svc.timeout_ms', DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS),
      batchSize: integer(batchSize, 'svc.batch_size', DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE),
    };
  }

  function tenantId(): string | null {
    const value = plv8.execute(statements.tenant, [SERVER])[0]?.tenant_id;
    return typeof value === 'string' && value !== '' ? value : null;
  }

  /** One request to `base` (s.url, or s.opsUrl for the operations API). */
  function exchange(
    s: Settings,
    method: 'GET' | 'POST',
    path: string,
    body: string | null,
    headers: Array<[string, string]>,
    base = s.url,
  ): { status: number; content: string } {
    plv8.execute(statements.prepare, [String(s.timeoutMs)]);
    try {
      const row = plv8.execute(statements.request, [
        method,
        base + path,
        JSON.stringify(headers),
        body === null ? null : 'application/json',
        body,
      ])[0];
      return { status: Number(row?.status), content: String(row?.content ?? '') };
    } catch (error) {
      const e = error as { sqlerrcode?: string; message?: string };
      if (e.sqlerrcode === QUERY_CANCELED) throw error;
      const text = String(e.message ?? error);
      if (/timed? ?out/i.test(text)) {
        fail(
          SQLSTATES.unavailable,
          `engine at ${base} did not answer within svc.timeout_ms (${s.timeoutMs} ms)`,
          undefined,
          ENGINE_CHECK_HINT,
        );
      }
      return fail(SQLSTATES.unavailable, `engine at ${base} is unreachable: ${text}`, undefined, ENGINE_CHECK_HINT);
    }
  }

  function parse(s: Settings, path: string, status: number, content: string): unknown {
    try {
      return JSON.parse(content);
    } catch {
      if (status === 200) {
        fail(
          SQLSTATES.unavailable,
          `engine at ${s.url} answered POST ${path} with a body that is not JSON`,
          undefined,
          ENGINE_CHECK_HINT,
        );
      }
      return null;
    }
  }

  /** POST a JSON body; the answer object of a 200, or the error the engine's refusal stands for. */
  function postJson(s: Settings, op: string, path: string, payload: unknown): Record<string, unknown> {
    const { status, content } = exchange(s, 'POST', path, JSON.stringify(payload), [
      ['Content-Type', 'application/json'],
    ]);
    const answer = parse(s, path, status, content) as Record<string, unknown> | null;
    if (status !== 200) {
      const message = answer && typeof answer.error === 'string' ? answer.error : undefined;
      // {"success": false, ...} bodies and 413 are the engine refusing the data; anything else is the engine's state.
      if (status >= 400 && status < 500 && ((answer !== null && 'success' in answer) || status === 413)) {
        fail(SQLSTATES.itemFailed, `svc_${op}: ${message ?? `HTTP ${status}`}`);
      }
      fail(
        SQLSTATES.unavailable,
        `engine at ${s.url} answered HTTP ${status} to POST ${path}${message ? `: ${message}` : ''}`,
        undefined,
        ENGINE_CHECK_HINT,
      );
    }
    return answer !== null && typeof answer === 'object' ? answer : {};
  }

  function postBatch(s: Settings, op: Op, items: Item[], offset: number, total: number): string[] {
    const path = `/api/${op}/batch`;
    const answer = postJson(s, op, path, { items }) as { results?: BatchResult[] };
    const results = answer.results;
    if (!Array.isArray(results) || results.length !== items.length) {
      fail(
        SQLSTATES.unavailable,
        `engine at ${s.url} answered POST ${path} without one result per item`,
        undefined,
        ENGINE_CHECK_HINT,
      );
    }
    return results.map((result, index) => {
      if (!result.success) {
        const detail = total > 1 ? `item ${offset + index + 1} of ${total}` : undefined;
        fail(SQLSTATES.itemFailed, `svc_${op}: ${result.message || 'item failed'}`, detail);
      }
      // Encrypt and rewrap answer a ciphertext, decrypt a plaintext.
      return String(op === 'decrypt' ? result.decryptedData : result.encryptedData);
    });
  }

  function runOne(cfg: Cfg, op: Op, item: Item): string {
    const results = postBatch(settings(cfg), op, [item], 0, 1);
    return results[0] as string;
  }

  function runArray(
    cfg: Cfg,
    op: Op,
    values: ReadonlyArray<string | null> | null,
    makeItem: (value: string) => Item,
  ): Array<string | null> | null {
    if (values === null) return null;
    const out = values.slice();
    const positions: number[] = [];
    out.forEach((v, i) => {
      if (v !== null && v !== undefined) positions.push(i);
    });
    // plv8 passes a multi-dimensional array as nested arrays.
    if (positions.some((i) => Array.isArray(out[i]))) fail('2202E', `svc_${op}: only one-dimensional arrays are supported`);
    if (positions.length === 0) return out;
    const s = settings(cfg);
    const total = positions.length;
    let start = 0;
    while (start < total) {
      let end = start;
      let size = 0;
      // A request closes at batch_size items or at the byte budget (one oversized value goes alone).
      while (end < total && end - start < s.batchSize) {
        const n = (out[positions[end] as number] as string).length;
        if (end > start && size + n > MAX_REQUEST_DATA_CHARS) break;
        size += n;
        end += 1;
      }
      const chunk = positions.slice(start, end);
      const results = postBatch(
        s,
        op,
        chunk.map((i) => makeItem(out[i] as string)),
        start,
        total,
      );
      chunk.forEach((i, k) => {
        out[i] = results[k] as string;
      });
      start = end;
    }
    return out;
  }

  /** The item maker of an array sent ahead, or 22023 for arguments that do not fit. */
  function aheadItems(name: string, op: string, policyCode: string | null): [Op, (data: string) => Item] {
    if (op !== 'encrypt' && op !== 'decrypt' && op !== 'rewrap') fail('22023', `${name}: op must be 'encrypt', 'decrypt' or 'rewrap'`);
    if (op === 'encrypt') {
      if (policyCode === null) fail('22023', `${name}: encrypt needs a policy code`);
      return [op, (data) => ({ data, policyCode })];
    }
    if (policyCode !== null) fail('22023', `${name}: ${op} takes no policy code`);
    return [op, (data) => ({ data })];
  }

  function arraySend(op: string, values: ReadonlyArray<string | null> | null, policyCode: string | null): number {
    aheadItems('svc_array_send', op, policyCode);
    const sent = values === null ? [] : values.filter((v) => v !== null && v !== undefined);
    if (sent.some((v) => Array.isArray(v))) fail('2202E', 'svc_array_send: only one-dimensional arrays are supported');
    if (ahead.length === 2) ahead.shift();
    ahead.push({ op, policyCode, values: values === null ? null : values.slice() });
    return sent.length;
  }

  function arrayCollect(cfg: Cfg, op: string, values: ReadonlyArray<string | null> | null, policyCode: string | null): Array<string | null> | null {
    const [checkedOp, makeItem] = aheadItems('svc_array_collect', op, policyCode);
    const same = (a: ReadonlyArray<string | null> | null, b: ReadonlyArray<string | null> | null) =>
      a === null || b === null ? a === b : a.length === b.length && a.every((v, i) => v === b[i]);
    const index = ahead.findIndex((a) => a.op === op && a.policyCode === policyCode && same(a.values, values));
    if (index < 0) {
      fail('55000', 'svc_array_collect: this session has no array sent ahead with these arguments', undefined,
        'Call svc_array_send with the same arguments first.');
    }
    ahead.splice(index, 1);
    return runArray(cfg, checkedOp, values, makeItem);
  }

  function health(cfg: Cfg): string {
    const s = settings(cfg);
    const { status, content } = exchange(s, 'GET', '/api/health', null, []);
    if (status !== 200) {
      fail(
        SQLSTATES.unavailable,
        `engine at ${s.url} answered HTTP ${status} to GET /api/health`,
        undefined,
        ENGINE_CHECK_HINT,
      );
    }
    return content;
  }

  return {
    encrypt: (cfg, data, policyCode) => runOne(cfg, 'encrypt', { data, policyCode }),
    encryptByName: (cfg, data, policyName, policyVersion) =>
      runOne(cfg, 'encrypt', policyVersion === null ? { data, policyName } : { data, policyName, policyVersion }),
    decrypt: (cfg, data) => runOne(cfg, 'decrypt', { data }),
    encryptArray: (cfg, values, policyCode) => runArray(cfg, 'encrypt', values, (data) => ({ data, policyCode })),
    decryptArray: (cfg, values) => runArray(cfg, 'decrypt', values, (data) => ({ data })),
    rewrap: (cfg, data) => runOne(cfg, 'rewrap', { data }),
    rewrapArray: (cfg, values) => runArray(cfg, 'rewrap', values, (data) => ({ data })),
    arraySend: (_cfg, op, values, policyCode) => arraySend(op, values, policyCode),
    arrayCollect,
    equalityTerms: (cfg, data, policyCode) => {
      const s = settings(cfg);
      const path = '/api/equality-terms';
      const { terms } = postJson(s, 'equality_terms', path, { data, policyCode });
      if (!Array.isArray(terms) || !terms.every((t) => typeof t === 'string')) {
        fail(SQLSTATES.unavailable, `engine at ${s.url} answered POST ${path} without terms`, undefined, ENGINE_CHECK_HINT);
      }
      return terms as string[];
    },
    health,
    engineInfo: (cfg) => {
      const s = settings(cfg);
      const info: Record<string, unknown> = {
        engineServer: SERVER,
        engineUrl: s.url,
        opsUrl: s.opsUrl,
        bridge: 'plv8',
        timeoutMs: s.timeoutMs,
        batchSize: s.batchSize,
        health: JSON.parse(health(cfg)),
      };
      // The operations API may have its own listener (the server's ops_url); the tenant id is its credential.
      const tenant = tenantId();
      const headers: Array<[string, string]> = tenant ? [['X-SVC-Tenant-Id', tenant]] : [];
      const { status, content } = exchange(s, 'GET', '/engine/api/v1/runtime/info', null, headers, s.opsUrl);
      if (status === 200) {
        info.runtime = JSON.parse(content);
      } else {
        info.runtime = null;
        info.runtimeStatus = status;
      }
      return JSON.stringify(info);
    },
  };
}
