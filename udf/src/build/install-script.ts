// Generates what a DBA applies: each migration is ONE `DO` statement, so it is one transaction whether
// it runs under `psql -f`, a migration tool, or inside CREATE EXTENSION, and it is idempotent (CREATE OR
// REPLACE, IF NOT EXISTS, GRANT). The DO block picks the bridge language at install time — the one
// named in `svc.bridge`, else the one an earlier install used, else PL/Python, else plv8 with `http` —
// and creates the functions in the schema named by `svc.install_schema` (default: the schema an earlier
// install used, else public), or, inside CREATE EXTENSION, in the extension's schema.
import { DBLINK_INTERNALS, DBLINK_MARKER, DBLINK_OBSOLETE, dblinkInstall, dblinkUninstall, forEachExtensionFunction } from './dblink-bridge.js';
import { ERROR_VARIABLES, raiseAgain, withCleanErrors } from './sql-errors.js';
import { BRIDGE_FDW, CFG_SQL, FUNCTIONS, IMPLS, isCiphertextSql, PROCEDURES, ROLE, ROTATION, SERVER_NAME } from './sql-surface.js';

export type InstallMode = 'migration' | 'extension';

export interface BridgeSources {
  /** The PL/Python module (udf/src/plpython/svc_bridge.py). */
  readonly python: string;
  /** The plv8 bridge as one expression evaluating to its exports (see plv8-bundle.ts). */
  readonly javascript: string;
  /** Short content hashes: the per-backend cache key, so a reinstall takes effect in open sessions. */
  readonly pythonHash: string;
  readonly javascriptHash: string;
}

/** Dollar-quotes text with a tag that does not occur in it. */
export function dollarQuote(text: string, tag: string): string {
  const delimiter = `$${tag}$`;
  if (text.includes(delimiter)) throw new Error(`text contains the dollar-quote delimiter ${delimiter}`);
  return `${delimiter}${text}${delimiter}`;
}

const HEADER = '-- Generated from udf/ by `npm run sql -w udf`; do not edit by hand (a test compares this file with the generator).';

/**
 * The target_schema declaration every install block starts with. CREATE EXTENSION runs the script with
 * search_path set to the extension's schema. A migration or the uninstall uses the schema named by
 * svc.install_schema; without it, the one schema an earlier migration installed svc_encrypt into (so
 * 0002, 0003, a re-apply and the uninstall follow a custom-schema install without the setting); else public.
 */
function targetSchema(mode: InstallMode): string {
  return mode === 'extension'
    ? 'target_schema text := current_schema();'
    : `target_schema text := coalesce(nullif(current_setting('svc.install_schema', true), ''),
    (SELECT pg_catalog.min(n.nspname::text) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE p.proname = 'svc_encrypt' HAVING pg_catalog.count(DISTINCT n.oid) = 1), 'public');`;
}

/** The declarations every install block starts with: target schema and bridge language. */
function chooseSchemaAndBridge(mode: InstallMode): string {
  const schema = targetSchema(mode);
  const available =
    mode === 'extension'
      ? "EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = '%s')"
      : "EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = '%s')";
  const has = (name: string) => available.replace('%s', name);
  const ensureLanguage =
    mode === 'extension'
      ? `  IF bridge = 'plpython3u' AND NOT EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = 'plpython3u') THEN
    RAISE EXCEPTION 'svc_bridge: the plpython3u language is not installed in this database'
      USING ERRCODE = 'SV003', HINT = 'Run CREATE EXTENSION plpython3u first (or CREATE EXTENSION plv8 and http, with SET svc.bridge = ''plv8'').';
  END IF;
  IF bridge = 'plv8' AND (NOT EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = 'plv8')
                          OR NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'http')) THEN
    RAISE EXCEPTION 'svc_bridge: the plv8 bridge needs the plv8 and http extensions installed in this database'
      USING ERRCODE = 'SV003', HINT = 'Run CREATE EXTENSION plv8; CREATE EXTENSION http; first.';
  END IF;
  IF bridge = 'dblink' AND NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'dblink') THEN
    RAISE EXCEPTION 'svc_bridge: the dblink bridge needs the dblink extension installed in this database'
      USING ERRCODE = 'SV003', HINT = 'Run CREATE EXTENSION dblink; first.';
  END IF;`
      : `  IF bridge = 'plpython3u' AND NOT ${has('plpython3u')} THEN
    RAISE EXCEPTION 'svc bridge: plpython3u is not available on this server' USING ERRCODE = 'SV003',
      HINT = 'Install postgresql-plpython3-<version> (Debian), or choose plv8 with SET svc.bridge = ''plv8''.';
  END IF;
  IF bridge = 'plv8' AND NOT (${has('plv8')} AND ${has('http')}) THEN
    RAISE EXCEPTION 'svc bridge: the plv8 bridge needs the plv8 and http extensions, and this server lacks them' USING ERRCODE = 'SV003',
      HINT = 'Install plv8 and pgsql-http (see docker/postgres.Dockerfile), or choose plpython3u.';
  END IF;
  IF bridge = 'dblink' AND NOT ${has('dblink')} THEN
    RAISE EXCEPTION 'svc bridge: the dblink bridge needs the dblink extension, and this server lacks it' USING ERRCODE = 'SV003',
      HINT = 'dblink ships with PostgreSQL (Debian: postgresql-<version>; elsewhere the contrib package).';
  END IF;
  IF bridge = 'plpython3u' THEN
    CREATE EXTENSION IF NOT EXISTS plpython3u;
  ELSIF bridge = 'dblink' THEN
    CREATE EXTENSION IF NOT EXISTS dblink;
  ELSE
    CREATE EXTENSION IF NOT EXISTS plv8;
    CREATE EXTENSION IF NOT EXISTS http;
  END IF;`;
  return `DECLARE
  ${schema}
  requested text := nullif(current_setting('svc.bridge', true), '');
  previous text;
  bridge text;
  http_schema text;
  py_prelude text;
  js_prelude text;
  dblink_schema text;
  missing_options text;
  ext_function regprocedure;
BEGIN
  SELECT l.lanname INTO previous
    FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_language l ON l.oid = p.prolang
   WHERE p.proname = 'svc__encrypt' AND p.pronamespace = to_regnamespace(target_schema)
     AND l.lanname IN ('plpython3u', 'plv8')
   LIMIT 1;
  IF previous IS NULL AND to_regprocedure(format('%I.${DBLINK_MARKER}', target_schema)) IS NOT NULL THEN
    previous := 'dblink';
  END IF;
  IF requested IS NOT NULL AND requested NOT IN ('plpython3u', 'plv8', 'dblink') THEN
    RAISE EXCEPTION 'svc.bridge must be plpython3u, plv8 or dblink, got "%"', requested USING ERRCODE = 'SV003';
  END IF;
  bridge := coalesce(requested, previous, CASE
    WHEN ${has('plpython3u')} THEN 'plpython3u'
    WHEN ${has('plv8')} AND ${mode === 'extension' ? "EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'http')" : has('http')} THEN 'plv8'
    WHEN ${mode === 'extension' ? "EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'dblink')" : has('dblink')} THEN 'dblink'
  END);
  IF bridge IS NULL THEN
    RAISE EXCEPTION 'svc bridge: ${mode === 'extension' ? 'this database has none of the bridge languages installed: plpython3u, plv8 with http, or dblink' : 'this database offers neither plpython3u, nor plv8 with the http extension, nor dblink'}'
      USING ERRCODE = 'SV003', HINT = '${
  mode === 'extension'
    ? // CREATE EXTENSION only sees languages already created in the database, not what the server could offer.
    'Create one first, then CREATE EXTENSION svc_bridge again: CREATE EXTENSION plpython3u; or CREATE EXTENSION dblink; (managed services), or CREATE EXTENSION plv8; CREATE EXTENSION http;. See docs/sql.md.'
    : 'Install postgresql-plpython3-<version> (Debian) or plv8 and pgsql-http, or make dblink available, then apply again.'
}';
  END IF;
${ensureLanguage}
  IF bridge = 'plv8' THEN
    SELECT pg_catalog.quote_ident(n.nspname) INTO http_schema
      FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'http';
  END IF;`;
}

function pythonPrelude(sources: BridgeSources): string {
  const key = `svc_bridge:${sources.pythonHash}`;
  // The module travels as base64 because PL/Python re-indents every line of a function body.
  return [
    `b = GD.get('${key}')`,
    'if b is None:',
    '    import base64, types',
    "    m = types.ModuleType('svc_bridge')",
    "    exec(compile(base64.b64decode('@MODULE_B64@').decode('utf-8'), 'svc_bridge.py', 'exec'), m.__dict__)",
    `    b = GD['${key}'] = m.Bridge(plpy)`,
    '',
  ].join('\n');
}

export function javascriptPrelude(sources: BridgeSources): string {
  const key = `svc_bridge:${sources.javascriptHash}`;
  return [
    `var b = globalThis['${key}'];`,
    `if (!b) b = globalThis['${key}'] = (${sources.javascript}).createBridge(plv8, @SCHEMA_JSON@, @HTTP_JSON@);`,
    '',
  ].join('\n');
}

const PINNED = 'SET search_path = pg_catalog, pg_temp';

/**
 * An internal function's Python statements, with the bridge's own errors (plpy.error raises plpy.Error)
 * raised again without the bridge's frames. PL/Python still prints the frame of the raise into CONTEXT
 * and prefixes the message with the exception's class; the wrappers (BRIDGE_ERRORS) take both away.
 * Other exceptions (a cancel) pass as they are.
 */
function pythonBody(python: string): string {
  const indented = python
    .split('\n')
    .map((line) => `    ${line}`)
    .join('\n');
  return `try:\n${indented}\nexcept plpy.Error as e:\n    raise e.with_traceback(None)`;
}

/**
 * The bridge functions are PARALLEL UNSAFE. While a query runs a parallel plan, its leader is in parallel
 * mode too, and there PostgreSQL refuses subtransactions and set_config: PL/Python's plpy.execute (the
 * interrupt check while waiting for a slow answer) starts one, plv8 sets http.keepalive, and the dblink
 * bridge's EXCEPTION blocks start one per call. A parallel plan would make such a call fail with
 * "cannot start subtransactions during a parallel operation", depending on the plan and on load.
 */
const BRIDGE_PARALLEL = 'PARALLEL UNSAFE';


function createFunctions(): string {
  const lines: string[] = [];
  for (const f of IMPLS) {
    lines.push(
      `  EXECUTE format('CREATE OR REPLACE FUNCTION %I.${f.name}(${f.args}) RETURNS ${f.returns} LANGUAGE %s VOLATILE ${BRIDGE_PARALLEL} ${PINNED} AS %L',`,
      `    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || ${dollarQuote(pythonBody(f.python), 'py')}`,
      `                                       ELSE js_prelude || ${dollarQuote(f.javascript, 'js')} END);`,
      // They take the engine address as an argument: only their owner (through the wrappers) calls them.
      // svc_user is named too because installs before the address moved to the server granted it EXECUTE.
      `  EXECUTE format('REVOKE ALL ON FUNCTION %I.${f.name}(${f.identity}) FROM PUBLIC, ${ROLE}', target_schema);`,
    );
  }
  for (const f of FUNCTIONS) {
    // SECURITY DEFINER: the wrapper calls the internal function as its owner; the caller chooses the
    // data and svc.timeout_ms / svc.batch_size, never the address.
    // PL/pgSQL rather than SQL: it catches the bridge's errors and raises them again clean.
    const options = `${f.strict ? 'STRICT ' : ''}VOLATILE ${BRIDGE_PARALLEL} SECURITY DEFINER ${PINNED}`;
    const body = withCleanErrors(`
BEGIN
  RETURN %1$I.${f.call.replace(/\bcfg\b/, CFG_SQL)};
END`);
    lines.push(
      `  EXECUTE format('CREATE OR REPLACE FUNCTION %I.${f.name}(${f.args}) RETURNS ${f.returns} LANGUAGE plpgsql ${options} AS %L',`,
      `    target_schema, format(${dollarQuote(body, 'b')}, target_schema));`,
      `  EXECUTE format('COMMENT ON FUNCTION %I.${f.name}(${f.identity}) IS %L', target_schema, ${dollarQuote(f.comment, 'c')});`,
    );
  }
  return lines.join('\n');
}

/**
 * The foreign-data wrapper the server SERVER_NAME is created on (sql-surface.ts), created once per
 * database; a NOTICE when a database or role setting still names svc.engine_url, which nothing reads now.
 */
function bridgeFdw(): string {
  return `  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_data_wrapper WHERE fdwname = '${BRIDGE_FDW}') THEN
    CREATE FOREIGN DATA WRAPPER ${BRIDGE_FDW};
    COMMENT ON FOREIGN DATA WRAPPER ${BRIDGE_FDW} IS 'holds the engine address of the svc bridge: CREATE SERVER ${SERVER_NAME} FOREIGN DATA WRAPPER ${BRIDGE_FDW} OPTIONS (url ...); see docs/sql.md';
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_db_role_setting d, pg_catalog.unnest(d.setconfig) AS c(setting)
              WHERE d.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()))
                AND c.setting LIKE 'svc.engine\\_url=%') THEN
    RAISE NOTICE 'svc bridge: svc.engine_url is no longer read; the engine address is the option url of the foreign server ${SERVER_NAME}'
      USING HINT = 'CREATE SERVER ${SERVER_NAME} FOREIGN DATA WRAPPER ${BRIDGE_FDW} OPTIONS (url ''http://...''), then ALTER DATABASE ... RESET svc.engine_url; see docs/sql.md.';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server WHERE srvname = '${SERVER_NAME}') THEN
    RAISE NOTICE 'svc bridge: create the foreign server ${SERVER_NAME} that holds the engine address'
      USING HINT = 'CREATE SERVER ${SERVER_NAME} FOREIGN DATA WRAPPER ${BRIDGE_FDW} OPTIONS (url ''http://127.0.0.1:8080''); see docs/sql.md.';
  END IF;`;
}

function grants(objects: ReadonlyArray<{ kind: 'FUNCTION' | 'PROCEDURE'; name: string; identity: string }>): string {
  return objects
    .map(
      (o) =>
        `  EXECUTE format('REVOKE ALL ON ${o.kind} %I.${o.name}(${o.identity}) FROM PUBLIC', target_schema);\n` +
        `  EXECUTE format('GRANT EXECUTE ON ${o.kind} %I.${o.name}(${o.identity}) TO ${ROLE}', target_schema);`,
    )
    .join('\n');
}

const RAISE_HELPER = `CREATE OR REPLACE FUNCTION %I.svc__raise(sqlstate text, message text, detail text, hint text) RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = coalesce(detail, ''), HINT = coalesce(hint, '');
END
$body$`;

function roleAndSchema(mode: InstallMode): string {
  const schema =
    mode === 'migration'
      ? `  IF to_regnamespace(target_schema) IS NULL THEN
    EXECUTE format('CREATE SCHEMA %I', target_schema);
    EXECUTE format('COMMENT ON SCHEMA %I IS %L', target_schema, 'created by the svc bridge install; its uninstall drops it when empty');
  END IF;`
      : '';
  return `${schema}
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '${ROLE}') THEN
    CREATE ROLE ${ROLE} NOLOGIN;
  END IF;
  IF target_schema <> 'public' THEN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO ${ROLE}', target_schema);
  END IF;`;
}

/** The bridge functions: schema, role, helper, the SQL surface in the chosen language, grants. */
export function bridgeBlock(mode: InstallMode, sources: BridgeSources): string {
  const helper = { kind: 'FUNCTION' as const, name: 'svc__raise', identity: 'text, text, text, text' };
  return `DO ${dollarQuote(
    `
${chooseSchemaAndBridge(mode)}
${roleAndSchema(mode)}
  EXECUTE format(${dollarQuote(RAISE_HELPER, 'f')}, target_schema);
  -- Called by the plv8 bridge, which runs as the owner of the functions: nobody else needs it.
  EXECUTE format('REVOKE ALL ON FUNCTION %I.${helper.name}(${helper.identity}) FROM PUBLIC, ${ROLE}', target_schema);
  IF bridge = 'dblink' THEN
${dblinkInstall(dollarQuote)}
  ELSE
${[...DBLINK_INTERNALS, ...DBLINK_OBSOLETE].map((f) => `    EXECUTE format('DROP FUNCTION IF EXISTS %I.${f.name}(${f.identity})', target_schema);`).join('\n')}
  py_prelude := replace(${dollarQuote(pythonPrelude(sources), 'py')}, '@MODULE_B64@',
    translate(encode(convert_to(${dollarQuote(sources.python, 'svc_python_module')}, 'UTF8'), 'base64'), E'\\n', ''));
  js_prelude := replace(replace(${dollarQuote(javascriptPrelude(sources), 'js')},
    '@SCHEMA_JSON@', to_json(quote_ident(target_schema))::text),
    '@HTTP_JSON@', coalesce(to_json(http_schema)::text, 'null'));
${bridgeFdw()}
${createFunctions()}
${grants(FUNCTIONS.map((f) => ({ kind: 'FUNCTION' as const, name: f.name, identity: f.identity })))}
  IF bridge = 'plv8' THEN
    -- Whoever may call the http extension's functions can set curl options (a proxy) in a session that
    -- then calls svc_encrypt, and so choose where the values go; the bridge calls them as the owner.
${forEachExtensionFunction('http', 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', '    ')}
  END IF;
  END IF;
END
`,
    'svc_install',
  )};
`;
}

/**
 * The checks a column walk starts with (in a body declaring chunk_rows, tbl, col, key_col and key_type):
 * a positive chunk size, a text column, and the unique key it walks by (the single-column primary key
 * unless key_column names one), with its type for the `$1::type` comparison.
 */
function walkChecks(name: string): string {
  return `  IF chunk_rows IS NULL OR chunk_rows < 1 THEN
    RAISE EXCEPTION '${name}: chunk_rows must be a positive integer' USING ERRCODE = '22023';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped AND t.typcategory = 'S') THEN
    RAISE EXCEPTION '${name}: % has no text column %', tbl, col USING ERRCODE = '42703';
  END IF;
  IF key_col IS NULL THEN
    SELECT a.attname INTO key_col
      FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE i.indrelid = tbl AND i.indisprimary AND i.indnkeyatts = 1;
    IF key_col IS NULL THEN
      RAISE EXCEPTION '${name}: % has no single-column primary key', tbl
        USING ERRCODE = '22023', HINT = 'Pass key_column => a unique, not-null column to walk the table by.';
    END IF;
  END IF;
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO key_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = tbl AND a.attname = key_col AND a.attnum > 0 AND NOT a.attisdropped;
  IF key_type IS NULL THEN
    RAISE EXCEPTION '${name}: % has no column %', tbl, key_col USING ERRCODE = '42703';
  END IF;`;
}

/** Rows in a column walk's first chunk (then twice as many each chunk, up to chunk_rows). */
const FIRST_CHUNK_ROWS = 1000;

/**
 * The pipeline every column walk runs (in a body that ran walkChecks and declares WALK_VARIABLES): chunk
 * k+1 is read, without locks, and sent ahead to the engine (svc_array_send) before the results of chunk k
 * are collected, written and committed, so the engine works on one chunk while this backend writes the
 * other; the first chunks are small, so the backend is not idle while the engine does a whole first chunk.
 * The results are written back only where the value is still the one read: a row another session changed
 * since keeps what that session wrote (and is counted in `skipped`), never overwritten with the old
 * value's result. `filter`: what a value must match to be read ($3 on is `readArgs`); `onlyChanged`:
 * write only results that differ from the value (rewrap); `afterWrite`: statements run with the chunk's
 * keys, vals and results, before the commit; `progress`: the notice after each chunk.
 */
function walkPipeline(w: {
  name: string;
  op: 'encrypt' | 'decrypt' | 'rewrap';
  policy: string;
  filter: string;
  readArgs?: string;
  onlyChanged?: boolean;
  afterWrite?: string;
  progress: string;
}): string {
  const send = (vals: string) => `PERFORM @SCHEMA@.svc_array_send('${w.op}', ${vals}, ${w.policy});`;
  const readArgs = `take${w.readArgs ?? ''}`;
  return `  read_sql := format(${dollarQuote(
    `
    SELECT pg_catalog.array_agg(k::text ORDER BY k), pg_catalog.array_agg(v ORDER BY k) FROM (
      SELECT %3$I AS k, %2$I::text AS v FROM %1$s
       WHERE ($1::text IS NULL OR %3$I > $1::%4$s) AND %2$I IS NOT NULL AND ${w.filter}
       ORDER BY %3$I LIMIT $2) AS chunk`,
    'q',
  )}, tbl, col, key_col, key_type);
  write_sql := format(${dollarQuote(
    `
    UPDATE %1$s t SET %2$I = u.new
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS u(k, old, new)
     WHERE t.%3$I = u.k::%4$s AND t.%2$I::text = u.old${w.onlyChanged ? ' AND u.new IS DISTINCT FROM u.old' : ''}`,
    'q',
  )}, tbl, col, key_col, key_type);
  -- The first chunk is small and each next one twice the last, up to chunk_rows, so the procedure does not
  -- sit idle while the engine does a whole first chunk.
  take := least(chunk_rows, ${FIRST_CHUNK_ROWS});
  BEGIN
    EXECUTE read_sql INTO keys, vals USING NULL::text, ${readArgs};
    IF keys IS NOT NULL THEN
      ${send('vals')}
    END IF;
  EXCEPTION WHEN OTHERS THEN
${raiseAgain('    ')}
  END;
  WHILE keys IS NOT NULL LOOP
    BEGIN
      take := least(chunk_rows::bigint, take::bigint * 2);
      EXECUTE read_sql INTO next_keys, next_vals USING keys[pg_catalog.cardinality(keys)], ${readArgs};
      IF next_keys IS NOT NULL THEN
        ${send('next_vals')}
      END IF;
      results := @SCHEMA@.svc_array_collect('${w.op}', vals, ${w.policy});
      EXECUTE write_sql USING keys, vals, results;
      GET DIAGNOSTICS written = ROW_COUNT;
      ${
        w.onlyChanged
          ? 'SELECT pg_catalog.count(*) INTO wanted FROM ROWS FROM (pg_catalog.unnest(vals), pg_catalog.unnest(results)) AS u(old, new) WHERE u.new IS DISTINCT FROM u.old;'
          : 'wanted := pg_catalog.cardinality(keys);'
      }${w.afterWrite ?? ''}
    EXCEPTION WHEN OTHERS THEN
${raiseAgain('      ')}
    END;
    COMMIT;
    examined := examined + pg_catalog.cardinality(keys);
    done := done + written;
    skipped := skipped + wanted - written;
    keys := next_keys;
    vals := next_vals;
    seconds := greatest(extract(epoch FROM clock_timestamp() - started)::float8, 0.000001);
    ${w.progress}
  END LOOP;
  IF skipped > 0 THEN
    RAISE NOTICE '${w.name}: % rows changed by another session while their chunk was at the engine were left as written; call the procedure again to do them', skipped;
  END IF;`;
}

/** The variables of walkPipeline. */
const WALK_VARIABLES = `read_sql text;
  take integer;
  write_sql text;
  keys text[];
  vals text[];
  next_keys text[];
  next_vals text[];
  results text[];
  written bigint;
  wanted bigint;
  examined bigint := 0;
  done bigint := 0;
  skipped bigint := 0;
  started timestamptz := clock_timestamp();
  seconds float8;`;

function procedureBody(op: 'encrypt' | 'decrypt'): string {
  const name = `svc_${op}_column`;
  return `
DECLARE
  key_col name := key_column;
  key_type text;
  ${WALK_VARIABLES}
  ${ERROR_VARIABLES}
BEGIN
${walkChecks(name)}
${walkPipeline({
  name,
  op,
  policy: op === 'encrypt' ? 'policy_code' : 'NULL',
  // Encrypt skips values already in ciphertext shape; decrypt skips values not in it.
  filter: `${op === 'encrypt' ? 'NOT ' : ''}${isCiphertextSql('%2$I')}`,
  progress: `RAISE NOTICE '${name}: % rows done, % rows/s', done, round(done / seconds);`,
})}
  RAISE NOTICE '${name}: finished, % rows in % s', done, round(extract(epoch FROM clock_timestamp() - started)::numeric, 3);
END
`;
}

/** The bulk procedures: PL/pgSQL over the array functions, committing per chunk. */
export function proceduresBlock(mode: InstallMode): string {
  const schema = targetSchema(mode);
  const creates = PROCEDURES.map(
    (p) =>
      // No SET search_path: a procedure with a SET clause cannot COMMIT; every name inside is qualified.
      `  EXECUTE format('CREATE OR REPLACE PROCEDURE %I.${p.name}(${p.args}) LANGUAGE plpgsql AS %L', target_schema,
    replace(${dollarQuote(procedureBody(p.op), 'p')}, '@SCHEMA@', quote_ident(target_schema)));
  EXECUTE format('COMMENT ON PROCEDURE %I.${p.name}(${p.identity}) IS %L', target_schema, ${dollarQuote(p.comment, 'c')});`,
  ).join('\n');
  return `DO ${dollarQuote(
    `
DECLARE
  ${schema}
BEGIN
  IF to_regprocedure(format('%I.svc_array_send(text, text[], text)', target_schema)) IS NULL THEN
    RAISE EXCEPTION 'svc bridge: install the bridge functions (0001-install-bridge.sql) in schema % first', target_schema
      USING ERRCODE = 'SV003';
  END IF;
${creates}
${grants(PROCEDURES.map((p) => ({ kind: 'PROCEDURE' as const, name: p.name, identity: p.identity })))}
END
`,
    'svc_install',
  )};
`;
}

/**
 * A ciphertext's key version: header bytes 2–5 (big-endian) of the base64url after `hub:<code>:`
 * (docs/api.md). `AQ` is how a header of format version 1 starts. One expression with no sub-select,
 * so PostgreSQL inlines it into the calling query: a column walk evaluates it for every row it passes.
 * Versions beyond the integer range (no hub issues them) read as NULL rather than negative.
 */
const KEY_VERSION_BODY = `
  SELECT CASE WHEN data ~ '^hub:[A-Za-z0-9_.-]+:AQ[A-Za-z0-9_-]{6}' THEN
    nullif(greatest(('x' || pg_catalog.substr(pg_catalog.encode(pg_catalog.decode(pg_catalog.translate(
      pg_catalog.substr(pg_catalog.split_part(data, ':', 3), 1, 8), '-_', '+/'), 'base64'), 'hex'), 5, 8))::pg_catalog.bit(32)::integer, -1), -1)
  END`;

const KEY_VERSIONS_BODY = `
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped AND t.typcategory = 'S') THEN
    RAISE EXCEPTION 'svc_key_versions: % has no text column %', tbl, col USING ERRCODE = '42703';
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT CASE WHEN ${isCiphertextSql('v').replace(/'/g, "''")} THEN pg_catalog.split_part(v, '':'', 2) END,
            @SCHEMA@.svc_key_version(v), pg_catalog.count(*)
       FROM (SELECT %2$I::text AS v FROM %1$s WHERE %2$I IS NOT NULL) AS s GROUP BY 1, 2 ORDER BY 1, 2',
    tbl, col);
END`;

function rewrapColumnBody(): string {
  const name = 'svc_rewrap_column';
  return `
DECLARE
  key_col name := key_column;
  key_type text;
  -- The newest key version per policy code, learnt from what rewrap answers: values already there are
  -- skipped without a round trip, so a second run only reads the table (but for the first two chunks,
  -- read before the first answer is in).
  newest jsonb := '{}';
  counted record;
  ${WALK_VARIABLES}
  ${ERROR_VARIABLES}
BEGIN
${walkChecks(name)}
  IF dry_run THEN
    FOR counted IN SELECT * FROM @SCHEMA@.svc_key_versions(tbl, col) LOOP
      RAISE NOTICE '${name} (dry run): policy %, key version %: % values', coalesce(counted.policy_code, '(not a ciphertext)'),
        coalesce(counted.key_version::text, '-'), counted.value_count;
    END LOOP;
    RETURN;
  END IF;
${walkPipeline({
  name,
  op: 'rewrap',
  policy: 'NULL',
  // Ciphertexts not known to be at their policy's newest version.
  filter: `${isCiphertextSql('%2$I')}
         AND NOT coalesce(@SCHEMA@.svc_key_version(%2$I) >= ($3::jsonb ->> pg_catalog.split_part(%2$I, ':', 2))::integer, false)`,
  readArgs: ', newest',
  onlyChanged: true,
  afterWrite: `
      newest := newest || coalesce((SELECT pg_catalog.jsonb_object_agg(p, m) FROM (
        SELECT pg_catalog.split_part(v, ':', 2) AS p, pg_catalog.max(@SCHEMA@.svc_key_version(v)) AS m
          FROM pg_catalog.unnest(results) AS v GROUP BY 1) AS x), '{}');`,
  progress: `RAISE NOTICE '${name}: % values examined, % rewrapped, % values/s', examined, done, round(examined / seconds);`,
})}
  RAISE NOTICE '${name}: finished, % values rewrapped of % examined in % s', done, examined,
    round(extract(epoch FROM clock_timestamp() - started)::numeric, 3);
END
`;
}

/** Key rotation on a column: svc_key_version, svc_key_versions and svc_rewrap_column (needs 0001). */
export function rotationBlock(mode: InstallMode): string {
  const schema = targetSchema(mode);
  const [keyVersion, keyVersions, rewrapColumn] = ROTATION;
  const comment = (o: (typeof ROTATION)[number]) =>
    `  EXECUTE format('COMMENT ON ${o.kind} %I.${o.name}(${o.identity}) IS %L', target_schema, ${dollarQuote(o.comment, 'c')});`;
  const body = (text: string, tag: string) => `replace(${dollarQuote(text, tag)}, '@SCHEMA@', quote_ident(target_schema))`;
  return `DO ${dollarQuote(
    `
DECLARE
  ${schema}
BEGIN
  IF to_regprocedure(format('%I.svc_array_send(text, text[], text)', target_schema)) IS NULL THEN
    RAISE EXCEPTION 'svc bridge: install the bridge functions (0001-install-bridge.sql) in schema % first', target_schema
      USING ERRCODE = 'SV003';
  END IF;
  -- Neither SET search_path nor STRICT: either keeps this one-expression function from being inlined
  -- (NULL in still gives NULL out); every name is qualified.
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_key_version(data text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
    target_schema, ${dollarQuote(KEY_VERSION_BODY, 'f')});
${comment(keyVersion!)}
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_key_versions(tbl regclass, col name)
      RETURNS TABLE (policy_code text, key_version integer, value_count bigint)
      LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS %L', target_schema, ${body(KEY_VERSIONS_BODY, 'f')});
${comment(keyVersions!)}
  -- No SET search_path: a procedure with a SET clause cannot COMMIT; every name inside is qualified.
  EXECUTE format('CREATE OR REPLACE PROCEDURE %I.svc_rewrap_column(tbl regclass, col name, chunk_rows integer DEFAULT 10000,
      key_column name DEFAULT NULL, dry_run boolean DEFAULT false) LANGUAGE plpgsql AS %L', target_schema, ${body(rewrapColumnBody(), 'p')});
${comment(rewrapColumn!)}
${grants([...ROTATION])}
END
`,
    'svc_install',
  )};
`;
}

/** Removes every object the migrations create; the schema only when the install created it and it is empty. */
/**
 * For the uninstall (with `obsolete record` declared): the settings that held the engine address and the
 * tenant id before they moved to the foreign server and its user mapping. Nothing reads them, and they
 * should not outlive the install: the database's own are reset (a NOTICE with the command when the role
 * may not), a role's are named in a NOTICE with the command that removes them (they are the role's).
 */
function obsoleteSettings(): string {
  return `  FOR obsolete IN
    SELECT d.setrole, pg_catalog.split_part(c.setting, '=', 1) AS name
      FROM pg_catalog.pg_db_role_setting d, pg_catalog.unnest(d.setconfig) AS c(setting)
     WHERE d.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()))
       AND pg_catalog.split_part(c.setting, '=', 1) IN ('svc.engine_url', 'svc.tenant_id')
  LOOP
    IF obsolete.setrole = 0 THEN
      BEGIN
        EXECUTE format('ALTER DATABASE %I RESET %s', pg_catalog.current_database(), obsolete.name);
        RAISE NOTICE 'svc bridge: database setting % removed (nothing reads it since the foreign server ${SERVER_NAME})', obsolete.name;
      EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'svc bridge: database setting % is still set, and nothing reads it', obsolete.name
          USING HINT = format('The database owner can run: ALTER DATABASE %I RESET %s;', pg_catalog.current_database(), obsolete.name);
      END;
    ELSE
      RAISE NOTICE 'svc bridge: role % still sets %, and nothing reads it', obsolete.setrole::regrole, obsolete.name
        USING HINT = format('ALTER ROLE %s RESET %s; (or ALTER ROLE ... IN DATABASE ... RESET)', obsolete.setrole::regrole, obsolete.name);
    END IF;
  END LOOP;`;
}

export function uninstallBlock(): string {
  const drops = [
    ...ROTATION.map((o) => `${o.kind} %1$I.${o.name}(${o.identity})`),
    ...PROCEDURES.map((p) => `PROCEDURE %1$I.${p.name}(${p.identity})`),
    ...FUNCTIONS.map((f) => `FUNCTION %1$I.${f.name}(${f.identity})`),
    ...IMPLS.map((f) => `FUNCTION %1$I.${f.name}(${f.identity})`),
    ...[...DBLINK_INTERNALS, ...DBLINK_OBSOLETE].map((f) => `FUNCTION %1$I.${f.name}(${f.identity})`),
    'FUNCTION %1$I.svc__raise(text, text, text, text)',
  ]
    .map(
      (object) =>
        `  EXECUTE format('DROP ${object.split(' ')[0]} IF EXISTS ${object.slice(object.indexOf(' ') + 1)}', target_schema);`,
    )
    .join('\n');
  return `DO ${dollarQuote(
    `
DECLARE
  ${targetSchema('migration')}
  ext_function regprocedure;
  obsolete record;
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'svc_bridge') THEN
    RAISE EXCEPTION 'svc bridge: installed as an extension here; use DROP EXTENSION svc_bridge' USING ERRCODE = 'SV003';
  END IF;
${dblinkUninstall()}
  IF EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
              WHERE p.proname = 'svc__encrypt' AND p.pronamespace = to_regnamespace(target_schema) AND l.lanname = 'plv8') THEN
${forEachExtensionFunction('http', 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC', '    ')}
  END IF;
${drops}
  -- The server ${SERVER_NAME} is the DBA's (it may serve an install in another schema): it stays, and with
  -- it the wrapper it needs; an unused wrapper goes.
  IF EXISTS (SELECT FROM pg_catalog.pg_foreign_data_wrapper WHERE fdwname = '${BRIDGE_FDW}') THEN
    IF EXISTS (SELECT FROM pg_catalog.pg_foreign_server s JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                WHERE w.fdwname = '${BRIDGE_FDW}') THEN
      RAISE NOTICE 'svc bridge: foreign-data wrapper ${BRIDGE_FDW} kept, a server uses it'
        USING HINT = 'DROP SERVER ${SERVER_NAME} CASCADE; DROP FOREIGN DATA WRAPPER ${BRIDGE_FDW}; when no install uses them.';
    ELSE
      DROP FOREIGN DATA WRAPPER ${BRIDGE_FDW};
    END IF;
  END IF;
  IF target_schema <> 'public' AND to_regnamespace(target_schema) IS NOT NULL THEN
    EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM ${ROLE}', target_schema);
    IF pg_catalog.obj_description(to_regnamespace(target_schema), 'pg_namespace') LIKE 'created by the svc bridge install%'
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_class WHERE relnamespace = to_regnamespace(target_schema))
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE pronamespace = to_regnamespace(target_schema))
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_type WHERE typnamespace = to_regnamespace(target_schema)) THEN
      EXECUTE format('DROP SCHEMA %I', target_schema);
    END IF;
  END IF;
${obsoleteSettings()}
  -- The role is cluster-wide: it goes only when nothing in any database still refers to it.
  IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '${ROLE}') THEN
    BEGIN
      DROP ROLE ${ROLE};
    EXCEPTION WHEN dependent_objects_still_exist THEN
      RAISE NOTICE 'svc bridge: role ${ROLE} kept, other databases still grant it privileges';
    END;
  END IF;
END
`,
    'svc_uninstall',
  )};
`;
}

export function migrationFiles(sources: BridgeSources): Record<string, string> {
  return {
    'migrations/0001-install-bridge.sql': `${HEADER}
-- Installs the svc bridge functions: svc_encrypt, svc_encrypt_by_name, svc_decrypt (scalar and array forms),
-- svc_health, svc_engine_info, in the schema named by the setting svc.install_schema (default: the schema an
-- earlier install used, else public), in the
-- bridge language named by svc.bridge (plpython3u or plv8), else the one already installed, else plpython3u
-- when available, else plv8 with the http extension. Creates the role ${ROLE} and grants it EXECUTE on the
-- public functions. The engine address is the foreign server ${SERVER_NAME} (created by the DBA, docs/sql.md §2).
-- One DO statement: one transaction under any runner; idempotent. See docs/sql.md.
${bridgeBlock('migration', sources)}`,
    'migrations/0002-install-bulk-procedures.sql': `${HEADER}
-- Installs svc_encrypt_column / svc_decrypt_column: in-place, chunked, resumable bulk work on a column.
-- Needs 0001. One DO statement: one transaction under any runner; idempotent. See docs/sql.md.
${proceduresBlock('migration')}`,
    'migrations/0003-install-rotation.sql': `${HEADER}
-- Installs key rotation on a column: svc_key_version(text), svc_key_versions(table, column) and the
-- procedure svc_rewrap_column (chunked, resumable, skipping values already at the newest key version).
-- Needs 0001. One DO statement: one transaction under any runner; idempotent. See docs/rotation.md.
${rotationBlock('migration')}`,
    'uninstall.sql': `${HEADER}
-- Removes everything the migrations installed from the schema named by svc.install_schema (default: the one
-- schema holding the install, else public), the settings svc.engine_url and svc.tenant_id of this database,
-- the schema itself when the install created it and it is empty, and the role ${ROLE} when no database
-- still refers to it. The procedural language stays (other code may use it), and so does the foreign server
-- ${SERVER_NAME} (the DBA's); the foreign-data wrapper ${BRIDGE_FDW} goes when no server uses it. One DO statement.
${uninstallBlock()}`,
  };
}

/**
 * The extension's current version. Every released version's script stays as it was released (a copy
 * under udf/src/extension-history/, never regenerated), and the upgrade from each of them is the current
 * script: every object is CREATE OR REPLACE'd, grants are re-stated, so applying it over an older version
 * leaves exactly what a fresh install of this version has (a test compares the two).
 */
export const EXTENSION_VERSION = '1.1';
/** Versions released before EXTENSION_VERSION, oldest first. */
export const RELEASED_EXTENSION_VERSIONS = ['1.0'] as const;

function extensionScript(sources: BridgeSources, upgrade: boolean): string {
  return `${HEADER}
-- The same objects as sql/migrations, for CREATE EXTENSION svc_bridge [SCHEMA s]${upgrade ? ' and ALTER EXTENSION svc_bridge UPDATE' : ''}. The bridge
-- language must already be installed (CREATE EXTENSION plpython3u, or dblink or plv8 and http with SET svc.bridge).
\\echo Use "${upgrade ? 'ALTER EXTENSION svc_bridge UPDATE' : 'CREATE EXTENSION svc_bridge'}" to load this file. \\quit
${bridgeBlock('extension', sources)}
${proceduresBlock('extension')}
${rotationBlock('extension')}`;
}

export function extensionFiles(sources: BridgeSources, history: Readonly<Record<string, string>>): Record<string, string> {
  const files: Record<string, string> = {
    'extension/svc_bridge.control': `# svc bridge: svc_encrypt / svc_decrypt through the encryption engine (see docs/sql.md)
comment = 'svc_encrypt / svc_decrypt and bulk column procedures calling the encryption engine'
default_version = '${EXTENSION_VERSION}'
relocatable = false
superuser = true
`,
    [`extension/svc_bridge--${EXTENSION_VERSION}.sql`]: extensionScript(sources, false),
  };
  for (const version of RELEASED_EXTENSION_VERSIONS) {
    const released = history[version];
    if (released === undefined) throw new Error(`the script of released extension version ${version} is missing`);
    files[`extension/svc_bridge--${version}.sql`] = released;
    files[`extension/svc_bridge--${version}--${EXTENSION_VERSION}.sql`] = extensionScript(sources, true);
  }
  return files;
}
