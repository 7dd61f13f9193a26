// The dblink bridge (svc.bridge = 'dblink', docs/sql.md): the same public functions as the PL/Python and
// plv8 bridges, written in PL/pgSQL over the dblink extension and the engine's PostgreSQL wire endpoint
// (docs/pgwire.md). It needs nothing a managed service withholds: dblink and PL/pgSQL.
//
// The engine address is the DBA's: it is the foreign server SERVER_NAME (host, port, dbname) and the
// credentials are a user mapping for the role that owns these functions. The public functions are
// SECURITY DEFINER with a pinned search_path, so an application role needs neither the server nor dblink:
// the install revokes dblink's functions from PUBLIC, because a role that may call them could open its own
// connection under the bridge's connection name and have the values sent there. Nothing reads an address
// from a setting or takes one as an argument.
import { withCleanErrors } from './sql-errors.js';
import { FUNCTIONS, IMPLS, ROLE, SERVER_NAME } from './sql-surface.js';

export { SERVER_NAME };
/** The dblink connection the bridge keeps open per session. */
export const CONNECTION_NAME = 'svc_engine';
/**
 * The second connection of the array forms: one chunk goes out on it while the answer to the one before is
 * read on the first, so the engine works while the backend places results.
 */
export const SECOND_CONNECTION_NAME = 'svc_engine_2';
/**
 * The connections of arrays sent ahead (svc_array_send) are named this, then a number. A connection is
 * reused only once its answer has been read (at most two are kept idle), so an answer can only be read as
 * the array it was sent for.
 */
export const AHEAD_CONNECTION_PREFIX = 'svc_engine_ahead_';
/** Most values an array sent ahead carries in its one command (the engine's default SVC_BATCH_MAX_ITEMS). */
const AHEAD_MAX_VALUES = 10_000;
/** Largest command text one round trip sends (the engine's default message limit is 32 MiB). */
export const MAX_COMMAND_CHARS = 8 * 1024 * 1024;
/** How long the wait for an answer polls without sleeping, in milliseconds. */
const SPIN_MS = 0.5;
/**
 * Polls after each sleep of the wait (bench:sql: a 1000-value answer of about 100 KiB took 1.4-1.5x
 * less time to wait for with 8-32 polls than with one; more polls only cost CPU while nothing arrives).
 */
const POLL_BURST = 16;

/** The internal functions (never executable by PUBLIC or svc_user), for the grants and the uninstall. */
export const DBLINK_INTERNALS: ReadonlyArray<{ name: string; identity: string }> = [
  { name: 'svc__dblink_setting', identity: 'text, integer, integer' },
  { name: 'svc__dblink_connect', identity: 'text, text' },
  { name: 'svc__dblink_connect', identity: 'text' },
  { name: 'svc__dblink_failed', identity: 'text, text, text, text, text, integer, integer, integer' },
  { name: 'svc__dblink_array', identity: 'text, text, text[]' },
  { name: 'svc__dblink_ahead_key', identity: 'text, text, text[], text' },
  { name: 'svc__dblink_ahead_state', identity: '' },
  { name: 'svc__dblink_many_head', identity: 'text, text' },
];

/**
 * Internal functions of earlier versions, dropped by the install (a re-apply, an extension upgrade, a
 * change of bridge) and by the uninstall: the one-value path and the send-and-wait now run inline in the
 * public functions, and the array forms' chunks now run in svc__dblink_array.
 */
export const DBLINK_OBSOLETE: ReadonlyArray<{ name: string; identity: string }> = [
  { name: 'svc__dblink_one', identity: 'text, text' },
  { name: 'svc__dblink_send', identity: 'text, text' },
  { name: 'svc__dblink_many', identity: 'text, text, integer, integer' },
];

/** A function present in every version of the dblink bridge: how the install and uninstall recognise one. */
export const DBLINK_MARKER = 'svc__dblink_connect(text)';

/** A text value as one command argument: base64 of its UTF-8 bytes, `-` for the empty string. */
const b64 = (expr: string) => `coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(${expr}, 'UTF8'), 'base64'), ''), '-')`;

// In the bodies below @S@ is the bridge's schema and @D@ dblink's, both quoted at install time.
const C = `'${CONNECTION_NAME}'`;
const C2 = `'${SECOND_CONNECTION_NAME}'`;

/**
 * Reads svc.timeout_ms into timeout_ms, inline for the common values, and svc.dblink_wait into blocking
 * (both declared with WAIT_DECLARE).
 */
const READ_SETTINGS = `
  setting := pg_catalog.current_setting('svc.timeout_ms', true);
  timeout_ms := CASE WHEN setting IS NULL OR setting = '' THEN 5000 WHEN setting ~ '^[0-9]{1,7}$' THEN setting::integer END;
  IF timeout_ms IS NULL OR timeout_ms < 1 OR timeout_ms > 3600000 THEN
    -- Anything else (blanks around the number, or not a number): the helper reads it or raises SV003.
    timeout_ms := @S@.svc__dblink_setting('svc.timeout_ms', 5000, 3600000);
  END IF;
  setting := pg_catalog.current_setting('svc.dblink_wait', true);
  blocking := CASE WHEN setting IS NULL OR setting IN ('', 'poll') THEN false WHEN setting = 'block' THEN true END;
  IF blocking IS NULL THEN
    RAISE EXCEPTION 'svc.dblink_wait must be poll or block, got "%"', setting USING ERRCODE = 'SV003';
  END IF;`;

/**
 * The wait for an answer on `conn` (see roundTrip), indented by `indent`; `onTimeout`: the statements run
 * when svc.timeout_ms has passed. With svc.dblink_wait = 'block' there is none: the fetch after it waits
 * in libpq, on the socket.
 */
function waitForAnswer(conn: string, onTimeout: readonly string[], indent: string): string {
  const poll = [
    'started := pg_catalog.clock_timestamp();',
    `spin_until := started + interval '${SPIN_MS} milliseconds';`,
    `WHILE @D@.dblink_is_busy(${conn}) = 1 LOOP`,
    '  IF pg_catalog.clock_timestamp() > spin_until THEN',
    "    IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN",
    ...onTimeout.map((line) => `      ${line}`),
    '    END IF;',
    '    PERFORM pg_catalog.pg_sleep(0.001);',
    '    -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:',
    '    -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.',
    `    FOR poll IN 1..${POLL_BURST} LOOP`,
    `      EXIT WHEN @D@.dblink_is_busy(${conn}) = 0;`,
    '    END LOOP;',
    '  END IF;',
    'END LOOP;',
  ];
  return ['IF NOT blocking THEN', ...poll.map((line) => `  ${line}`), 'END IF;'].map((line) => indent + line).join('\n');
}

/**
 * One round trip, inline in the function that needs it (no nested calls on the per-row path): open the
 * session's connection when there is none, send, wait, fetch with `fetch` (which assigns the answer) and
 * drain the connection in the same statement. A connection that broke (the send or the fetch fails with
 * class 08) is dropped and the command sent once more on a new one. Errors from the engine are raised
 * again with their SQLSTATE, message, detail and hint (svc__dblink_failed).
 *
 * The wait polls: tightly for the first SPIN_MS (an answer takes a few hundred microseconds; a 1 ms sleep
 * would cap a session at 1000 calls/s), then every millisecond (a burst of POLL_BURST polls after each
 * sleep), so a cancel is noticed, until
 * svc.timeout_ms. A cancel or statement_timeout during the wait closes the connection, so the answer
 * still on its way is never read as another call's (and the next call need not find a busy connection).
 */
function roundTrip(fetch: string): string {
  return `${READ_SETTINGS}
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce(${C} = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query(${C}, command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
${waitForAnswer(C, [
  "-- The answer may still come; closing the connection makes sure it is never read as another's.",
  `PERFORM @D@.dblink_disconnect(${C});`,
  'timed_out := true;',
  'EXIT;',
], '      ')}
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      ${fetch}
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect(${C}) WHERE ${C} = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server ${SERVER_NAME} did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;`;
}

/**
 * The answer's columns read from dblink_get_result on `conn`, then the end of the answer drained, in one
 * statement.
 */
function fetchInto(select: string, into: string, columns: string, conn = C): string {
  return `SELECT ${select} INTO ${into}
        FROM ROWS FROM (@D@.dblink_get_result(${conn}) AS (${columns}), @D@.dblink_get_result(${conn}) AS (end_of_answer text)) AS t;`;
}

/** The variables of a wait for an answer (waitForAnswer) and of the error handling after it. */
const WAIT_DECLARE = `
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;`;

const ROUND_TRIP_DECLARE = `${WAIT_DECLARE}
  timed_out boolean := false;`;

/** The internal functions' bodies, by name and identity as in DBLINK_INTERNALS. */
const INTERNAL_BODIES: Record<string, { args: string; returns: string; body: string }> = {
  // A whole-number setting (svc.timeout_ms, svc.batch_size) in [1, max]; SV003 naming it otherwise.
  'svc__dblink_setting(text, integer, integer)': {
    args: 'name text, fallback integer, max integer',
    returns: 'integer',
    body: `
DECLARE
  raw text := nullif(pg_catalog.btrim(pg_catalog.current_setting(name, true)), '');
  n bigint;
BEGIN
  IF raw IS NULL THEN RETURN fallback; END IF;
  IF raw !~ '^[0-9]{1,10}$' THEN
    RAISE EXCEPTION '% must be a whole number from 1 to %, got "%"', name, max, raw USING ERRCODE = 'SV003';
  END IF;
  n := raw::bigint;
  IF n < 1 OR n > max THEN
    RAISE EXCEPTION '% must be a whole number from 1 to %, got "%"', name, max, raw USING ERRCODE = 'SV003';
  END IF;
  RETURN n::integer;
END`,
  },
  // Opens a connection named conn on the foreign server, with the owner's user mapping.
  'svc__dblink_connect(text, text)': {
    args: 'op text, conn text',
    returns: 'void',
    body: `
DECLARE
  st text;
  msg text;
  det text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server WHERE srvname = '${SERVER_NAME}') THEN
    RAISE EXCEPTION '%: the foreign server ${SERVER_NAME} that holds the engine address does not exist', op USING ERRCODE = 'SV003',
      HINT = 'CREATE SERVER ${SERVER_NAME} FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host ..., port ..., dbname ''svc''), and a user mapping; see docs/sql.md.';
  END IF;
  BEGIN
    PERFORM @D@.dblink_connect(conn, '${SERVER_NAME}');
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL;
    IF msg LIKE '%user mapping%' OR det LIKE '%password authentication failed%' OR msg LIKE '%password is required%'
       OR det LIKE '%password is required%' OR det LIKE '%no password supplied%' THEN
      RAISE EXCEPTION '%: the engine refused the credentials of the user mapping for server ${SERVER_NAME}', op
        USING ERRCODE = 'SV003', DETAIL = coalesce(nullif(det, ''), msg),
        HINT = 'Check the user and password in CREATE USER MAPPING FOR <owner of the svc functions> SERVER ${SERVER_NAME} against SVC_PG_USER / SVC_PG_PASSWORD of the engine.';
    END IF;
    RAISE EXCEPTION '%: engine at foreign server ${SERVER_NAME} is unreachable', op
      USING ERRCODE = 'SV002', DETAIL = coalesce(nullif(det, ''), msg),
      HINT = 'Check that the engine runs with SVC_PG_PORT set and that the server options (host, port) point at it.';
  END;
END`,
  },
  // Opens the bridge's connection for the one-value functions (the name every version of the bridge has).
  'svc__dblink_connect(text)': {
    args: 'op text',
    returns: 'void',
    body: `
BEGIN
  PERFORM @S@.svc__dblink_connect(op, ${C});
END`,
  },
  // After a failed round trip: a broken connection is dropped (and the caller retries once); an engine error
  // is raised again as it came, its DETAIL "item i of n" counted over the whole array (item_offset: the
  // values of the array before the failed command). What is left of the answer is drained, unless the
  // caller has closed the connection already (the array forms do, on any error).
  'svc__dblink_failed(text, text, text, text, text, integer, integer, integer)': {
    args: 'op text, st text, msg text, det text, hnt text, attempt integer, item_offset integer, total integer',
    returns: 'void',
    body: `
DECLARE
  item text[];
BEGIN
  IF st LIKE '08%' OR st IN ('57P01', '57P02', '57P03', '57P05') THEN
    PERFORM @D@.dblink_disconnect(${C}) WHERE ${C} = ANY (@D@.dblink_get_connections());
    IF attempt = 1 THEN RETURN; END IF;
    RAISE EXCEPTION '%: engine at foreign server ${SERVER_NAME} is unreachable', op USING ERRCODE = 'SV002', DETAIL = msg;
  END IF;
  IF ${C} = ANY (@D@.dblink_get_connections()) THEN
    BEGIN
      PERFORM FROM @D@.dblink_get_result(${C}, false) AS t(data text);
    EXCEPTION WHEN OTHERS THEN
      PERFORM @D@.dblink_disconnect(${C});
    END;
  END IF;
  item := pg_catalog.regexp_match(coalesce(det, ''), '^item ([0-9]+) of [0-9]+$');
  IF item IS NOT NULL THEN
    det := pg_catalog.format('item %s of %s', item_offset + item[1]::integer, total);
  ELSIF total > 1 AND st = 'SV001' THEN
    det := pg_catalog.format('item %s of %s', item_offset + 1, total);
  END IF;
  RAISE EXCEPTION USING ERRCODE = st, MESSAGE = msg, DETAIL = coalesce(det, ''), HINT = coalesce(hnt, '');
END`,
  },
  // The command an array of `op` starts with: svc_<op>_many, and the policy for encrypt.
  'svc__dblink_many_head(text, text)': {
    args: 'op text, policy_code text',
    returns: 'text',
    body: `
BEGIN
  RETURN 'svc_' || op || '_many' || CASE WHEN op = 'encrypt' THEN ' ' || ${b64('policy_code')} ELSE '' END;
END`,
  },
  // The arguments of svc_array_send / svc_array_collect (fn) checked, and what identifies an array sent
  // ahead: the operation, the policy code and a hash of every value.
  'svc__dblink_ahead_key(text, text, text[], text)': {
    args: 'fn text, op text, data text[], policy_code text',
    returns: 'text',
    body: `
BEGIN
  IF op IS NULL OR op NOT IN ('encrypt', 'decrypt', 'rewrap') THEN
    RAISE EXCEPTION '%: op must be ''encrypt'', ''decrypt'' or ''rewrap''', fn USING ERRCODE = '22023';
  END IF;
  IF op = 'encrypt' AND policy_code IS NULL THEN
    RAISE EXCEPTION '%: encrypt needs a policy code', fn USING ERRCODE = '22023';
  END IF;
  IF op <> 'encrypt' AND policy_code IS NOT NULL THEN
    RAISE EXCEPTION '%: % takes no policy code', fn, op USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.array_ndims(data) > 1 THEN
    RAISE EXCEPTION '%: only one-dimensional arrays are supported', fn USING ERRCODE = '2202E';
  END IF;
  -- A 64-bit hash of the values (about 1 ms for 10,000, where md5 of the array's text took 2-14 ms) and
  -- the array's bounds, which the hash leaves out: the key only tells this session's own arrays apart.
  RETURN pg_catalog.format('%s %L %s %s', op, policy_code, pg_catalog.array_dims(data),
    pg_catalog.hash_array_extended(data COLLATE pg_catalog."C", 0));
END`,
  },
  // The session's arrays sent ahead, oldest first, the connections whose answers were read and the number
  // of the next connection, from the setting svc.ahead: {"next": n, "idle": [names], "pending": [{"key":
  // svc__dblink_ahead_key, "conn": name or null, "sent": values sent}, ...]}. A setting is rolled back with
  // the transaction that set it, while connections are not, so the state can be behind them, never ahead:
  // a pending array names the connection its own command went on (or one since closed, and then collect
  // sends again); an idle connection may still carry the answer of a send rolled back, and libpq refuses
  // to send on it (svc_array_send then opens it again); any other connection is closed by svc_array_send.
  'svc__dblink_ahead_state()': {
    args: '',
    returns: 'jsonb',
    body: `
DECLARE
  state jsonb;
BEGIN
  BEGIN
    state := nullif(pg_catalog.current_setting('svc.ahead', true), '')::jsonb;
  EXCEPTION WHEN OTHERS THEN
    state := NULL;
  END;
  IF pg_catalog.jsonb_typeof(state -> 'next') = 'number' AND pg_catalog.jsonb_typeof(state -> 'pending') = 'array'
     AND pg_catalog.jsonb_typeof(state -> 'idle') = 'array' THEN
    RETURN state;
  END IF;
  RETURN '{"next": 1, "idle": [], "pending": []}';
END`,
  },
  // The array forms: the non-NULL values go in *_many commands of at most svc.batch_size values and
  // MAX_COMMAND_CHARS characters (one larger value goes alone); order and NULL elements are kept. The
  // arguments are encoded in one query and each command is a slice of them joined in one call (a loop over
  // the elements in PL/pgSQL took twice as long); the answers are placed by a loop, which measured cheaper
  // than collecting them and rebuilding the array in one query (docs/sql.md §8).
  //
  // Two chunks are in flight, one on each connection (svc_engine and SECOND_CONNECTION_NAME, both opened
  // by svc__dblink_connect): while the answer to one is fetched and placed, the engine works on the next.
  // When the second connection cannot be opened (the engine's connection limit), the call goes on with one.
  // On any error or cancel both connections are closed, so no answer is left half-read on either; a broken
  // connection (class 08, or the engine closing it) makes the call start again once from the oldest chunk
  // not yet placed, on new connections. Each answer is waited for up to svc.timeout_ms.
  'svc__dblink_array(text, text, text[])': {
    args: 'op text, head text, data text[]',
    returns: 'text[]',
    body: `
DECLARE
  batch integer := @S@.svc__dblink_setting('svc.batch_size', 1000, 10000);
  conns constant text[] := ARRAY[${C}, ${C2}];
  out text[] := data;
  args text[];
  pos integer[];
  res text[];
  total integer;
  todo integer := 1;
  sent_lo integer[] := '{NULL,NULL}';
  sent_hi integer[] := '{NULL,NULL}';
  slot integer;
  hi integer;
  cap integer;
  chars bigint;
  command text;
  one_connection boolean := false;
  resume integer;
  retried integer;
  k integer;${WAIT_DECLARE}
BEGIN
  IF pg_catalog.array_ndims(data) IS NULL THEN RETURN data; END IF;
  IF pg_catalog.array_ndims(data) > 1 THEN
    RAISE EXCEPTION '%: only one-dimensional arrays are supported', op USING ERRCODE = '2202E';
  END IF;
  -- ORDER BY the ordinality costs no sort (the planner knows unnest yields it in order).
  args := ARRAY(SELECT ${b64('u.v')} FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  pos := ARRAY(SELECT (u.o + pg_catalog.array_lower(data, 1) - 1)::integer
                 FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  total := pg_catalog.cardinality(args);
  IF total = 0 THEN RETURN out; END IF;${READ_SETTINGS}
  LOOP
    BEGIN
      LOOP
        -- Each idle connection sends the next chunk, args todo .. hi (todo: the first value not yet sent).
        FOR s IN 1..2 LOOP
          CONTINUE WHEN sent_lo[s] IS NOT NULL OR todo > total OR (s = 2 AND one_connection);
          IF NOT coalesce(conns[s] = ANY (@D@.dblink_get_connections()), false) THEN
            IF s = 1 THEN
              PERFORM @S@.svc__dblink_connect(op, conns[s]);
            ELSE
              BEGIN
                PERFORM @S@.svc__dblink_connect(op, conns[s]);
              EXCEPTION WHEN OTHERS THEN
                one_connection := true;
                CONTINUE;
              END;
            END IF;
          END IF;
          cap := least(todo + batch - 1, total);
          hi := cap;
          command := pg_catalog.array_to_string(args[todo:hi], ' ');
          IF hi > todo AND pg_catalog.octet_length(command) > ${MAX_COMMAND_CHARS} THEN
            -- Values too large for a full chunk in one command: as many as fit, at least one.
            hi := todo;
            chars := pg_catalog.octet_length(args[todo]);
            WHILE hi < cap AND chars + 1 + pg_catalog.octet_length(args[hi + 1]) <= ${MAX_COMMAND_CHARS} LOOP
              hi := hi + 1;
              chars := chars + 1 + pg_catalog.octet_length(args[hi]);
            END LOOP;
            command := pg_catalog.array_to_string(args[todo:hi], ' ');
          END IF;
          IF @D@.dblink_send_query(conns[s], head || ' ' || command) <> 1 THEN
            RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
          END IF;
          sent_lo[s] := todo;
          sent_hi[s] := hi;
          todo := hi + 1;
        END LOOP;
        -- The answer to the oldest chunk in flight, if any.
        slot := CASE WHEN sent_lo[2] IS NULL OR sent_lo[1] < sent_lo[2] THEN 1 ELSE 2 END;
        EXIT WHEN sent_lo[slot] IS NULL;
${waitForAnswer('conns[slot]', [
  `RAISE EXCEPTION '%: engine at foreign server ${SERVER_NAME} did not answer within svc.timeout_ms (% ms)', op, timeout_ms`,
  "  USING ERRCODE = 'SV002';",
], '        ')}
        ${fetchInto('pg_catalog.array_agg(t.data ORDER BY t.i)', 'res', 'i integer, data text', 'conns[slot]')}
        IF coalesce(pg_catalog.cardinality(res), 0) <> sent_hi[slot] - sent_lo[slot] + 1 THEN
          RAISE EXCEPTION '%: the engine answered % values for %', op, coalesce(pg_catalog.cardinality(res), 0), sent_hi[slot] - sent_lo[slot] + 1
            USING ERRCODE = 'SV002';
        END IF;
        FOR k IN sent_lo[slot] .. sent_hi[slot] LOOP
          out[pos[k]] := res[k - sent_lo[slot] + 1];
        END LOOP;
        sent_lo[slot] := NULL;
      END LOOP;
      RETURN out;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect(c) FROM pg_catalog.unnest(conns) AS c WHERE c = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @D@.dblink_disconnect(c) FROM pg_catalog.unnest(conns) AS c WHERE c = ANY (@D@.dblink_get_connections());
    -- Everything before resume is placed. A broken connection returns here once per resume point (the
    -- retry of one chunk); anything else is raised, an engine error counted from the chunk it came from.
    resume := least(sent_lo[1], sent_lo[2], todo);
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, CASE WHEN retried IS DISTINCT FROM resume THEN 1 ELSE 2 END,
      coalesce(sent_lo[slot], resume) - 1, total);
    retried := resume;
    todo := resume;
    sent_lo := '{NULL,NULL}';
  END LOOP;
END`,
  },
};

/**
 * A public function sending one command that answers one row (data text), the round trip inline: these
 * are the per-row path, one PL/pgSQL call per value. `nullIf`: the arguments for which it answers NULL
 * without a round trip.
 */
function oneValue(op: string, command: string, nullIf?: string): string {
  return `
DECLARE
  op constant text := '${op}';
  command text;
  result text;${ROUND_TRIP_DECLARE}
BEGIN${nullIf ? `\n  IF ${nullIf} THEN RETURN NULL; END IF;` : ''}
  command := ${command};${roundTrip(fetchInto('t.data', 'result', 'data text'))}
  RETURN result;
END`;
}

/** The public functions in the dblink bridge, by name and identity (the same surface as sql-surface.ts). */
const PUBLIC_BODIES: Record<string, string> = {
  'svc_encrypt(text, text)': oneValue('svc_encrypt', `'svc_encrypt ' || ${b64('policy_code')} || ' ' || ${b64('data')}`),
  'svc_encrypt_by_name(text, text, integer)': oneValue('svc_encrypt', `'svc_encrypt_by_name ' || ${b64('policy_name')} || ' '
    || coalesce(policy_version::text, '-') || ' ' || ${b64('data')}`, 'data IS NULL OR policy_name IS NULL'),
  'svc_encrypt(text, text, integer)': oneValue('svc_encrypt', `'svc_encrypt_by_name ' || ${b64('policy_name')} || ' '
    || coalesce(policy_version::text, '-') || ' ' || ${b64('data')}`, 'data IS NULL OR policy_name IS NULL'),
  'svc_decrypt(text)': oneValue('svc_decrypt', `'svc_decrypt ' || ${b64('data')}`),
  'svc_encrypt(text[], text)': `
BEGIN
  RETURN @S@.svc__dblink_array('svc_encrypt', @S@.svc__dblink_many_head('encrypt', policy_code), data);
END`,
  'svc_decrypt(text[])': `
BEGIN
  RETURN @S@.svc__dblink_array('svc_decrypt', @S@.svc__dblink_many_head('decrypt', NULL), data);
END`,
  'svc_rewrap(text)': oneValue('svc_rewrap', `'svc_rewrap ' || ${b64('data')}`),
  'svc_rewrap(text[])': `
BEGIN
  RETURN @S@.svc__dblink_array('svc_rewrap', @S@.svc__dblink_many_head('rewrap', NULL), data);
END`,
  // An array sent ahead: its non-NULL values in one *_many command on a connection of its own, not waited
  // for. Two can be ahead at once (a third send discards the oldest). Arrays over AHEAD_MAX_VALUES values or
  // MAX_COMMAND_CHARS, and any the engine refuses a connection for, are recorded but go at collect.
  'svc_array_send(text, text[], text)': `
DECLARE
  key text;
  state jsonb;
  pending jsonb;
  idle jsonb;
  next_number bigint;
  conn text;
  args text[];
  command text;
  total integer;
  sent integer := 0;
BEGIN
  -- In the body, not the declarations: the handler that raises errors again clean only covers the body.
  key := @S@.svc__dblink_ahead_key('svc_array_send', op, data, policy_code);
  state := @S@.svc__dblink_ahead_state();
  pending := state -> 'pending';
  idle := state -> 'idle';
  next_number := (state ->> 'next')::bigint;
  IF pg_catalog.jsonb_array_length(pending) >= 2 THEN
    pending := pending - 0;
  END IF;
  -- Connections the state does not name: the oldest array's, just discarded, or one opened in a
  -- transaction that rolled back. Their answers are never read.
  PERFORM @D@.dblink_disconnect(c) FROM pg_catalog.unnest(@D@.dblink_get_connections()) AS c
   WHERE pg_catalog.starts_with(c, '${AHEAD_CONNECTION_PREFIX}') AND NOT idle ? c
     AND NOT EXISTS (SELECT FROM pg_catalog.jsonb_array_elements(pending) AS p WHERE p ->> 'conn' = c);
  IF pg_catalog.jsonb_array_length(idle) > 0 THEN
    conn := idle ->> 0;
    idle := idle - 0;
  ELSE
    conn := '${AHEAD_CONNECTION_PREFIX}' || next_number;
    next_number := next_number + 1;
  END IF;
  args := ARRAY(SELECT ${b64('u.v')} FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  total := coalesce(pg_catalog.cardinality(args), 0);
  IF total BETWEEN 1 AND ${AHEAD_MAX_VALUES} THEN
    command := @S@.svc__dblink_many_head(op, policy_code) || ' ' || pg_catalog.array_to_string(args, ' ');
    IF pg_catalog.octet_length(command) <= ${MAX_COMMAND_CHARS} THEN
      BEGIN
        IF coalesce(conn = ANY (@D@.dblink_get_connections()), false) THEN
          IF @D@.dblink_send_query(conn, command) = 1 THEN
            sent := total;
          ELSE
            -- An idle connection that broke, or still carries the answer of a send rolled back.
            PERFORM @D@.dblink_disconnect(conn);
          END IF;
        END IF;
        IF sent = 0 THEN
          PERFORM @S@.svc__dblink_connect('svc_array_send', conn);
          IF @D@.dblink_send_query(conn, command) = 1 THEN
            sent := total;
          END IF;
        END IF;
      EXCEPTION WHEN OTHERS THEN
        -- No connection (the engine's connection limit, or the engine down): the values go at collect,
        -- which reports any error.
        NULL;
      END;
      IF sent = 0 THEN
        PERFORM @D@.dblink_disconnect(conn) WHERE conn = ANY (@D@.dblink_get_connections());
      END IF;
    END IF;
  END IF;
  PERFORM pg_catalog.set_config('svc.ahead', pg_catalog.jsonb_build_object('next', next_number, 'idle', idle,
    'pending', pending || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('key', key,
      'conn', CASE WHEN sent > 0 THEN conn END, 'sent', sent)))::text, false);
  RETURN total;
END`,
  // The results of the array sent ahead with these arguments: its answer read on its own connection (sent
  // again once on a new one when that connection is gone or broke: the values are here), or the array
  // form when nothing went ahead. The connection is then idle, kept for the next send, or closed.
  'svc_array_collect(text, text[], text)': `
DECLARE
  key text;
  state jsonb;
  entry jsonb;
  entry_index integer;
  conn text;
  head text;
  out text[] := data;
  pos integer[];
  res text[];
  total integer;
  k integer;${WAIT_DECLARE}
BEGIN
  key := @S@.svc__dblink_ahead_key('svc_array_collect', op, data, policy_code);
  state := @S@.svc__dblink_ahead_state();
  head := @S@.svc__dblink_many_head(op, policy_code);
  SELECT e.p, e.o::integer - 1 INTO entry, entry_index
    FROM pg_catalog.jsonb_array_elements(state -> 'pending') WITH ORDINALITY AS e(p, o) WHERE e.p ->> 'key' = key ORDER BY e.o LIMIT 1;
  IF entry IS NULL THEN
    RAISE EXCEPTION 'svc_array_collect: this session has no array sent ahead with these arguments'
      USING ERRCODE = '55000', HINT = 'Call svc_array_send with the same arguments first.';
  END IF;
  state := pg_catalog.jsonb_set(state, '{pending}', (state -> 'pending') - entry_index);
  PERFORM pg_catalog.set_config('svc.ahead', state::text, false);
  conn := entry ->> 'conn';
  IF conn IS NULL THEN
    RETURN @S@.svc__dblink_array('svc_' || op, head, data);
  END IF;
  pos := ARRAY(SELECT (u.o + pg_catalog.array_lower(data, 1) - 1)::integer
                 FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  total := pg_catalog.cardinality(pos);${READ_SETTINGS}
  FOR attempt IN 1..2 LOOP
    BEGIN
      IF NOT coalesce(conn = ANY (@D@.dblink_get_connections()), false) THEN
        PERFORM @S@.svc__dblink_connect('svc_array_collect', conn);
        IF @D@.dblink_send_query(conn, head || ' ' || pg_catalog.array_to_string(ARRAY(
             SELECT ${b64('u.v')} FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o), ' ')) <> 1 THEN
          RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
        END IF;
      END IF;
${waitForAnswer('conn', [
  "RAISE EXCEPTION 'svc_array_collect: engine at foreign server ${SERVER_NAME} did not answer within svc.timeout_ms (% ms)', timeout_ms",
  "  USING ERRCODE = 'SV002';",
], '      ')}
      ${fetchInto('pg_catalog.array_agg(t.data ORDER BY t.i)', 'res', 'i integer, data text', 'conn')}
      IF coalesce(pg_catalog.cardinality(res), 0) <> total THEN
        RAISE EXCEPTION 'svc_array_collect: the engine answered % values for %', coalesce(pg_catalog.cardinality(res), 0), total
          USING ERRCODE = 'SV002';
      END IF;
      FOR k IN 1 .. total LOOP
        out[pos[k]] := res[k];
      END LOOP;
      IF pg_catalog.jsonb_array_length(state -> 'idle') < 2 THEN
        PERFORM pg_catalog.set_config('svc.ahead', pg_catalog.jsonb_set(state, '{idle}', (state -> 'idle') || pg_catalog.to_jsonb(conn))::text, false);
      ELSE
        PERFORM @D@.dblink_disconnect(conn);
      END IF;
      RETURN out;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect(conn) WHERE conn = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @D@.dblink_disconnect(conn) WHERE conn = ANY (@D@.dblink_get_connections());
    -- A broken connection comes back here once (the values are sent again on a new one); anything else is raised.
    PERFORM @S@.svc__dblink_failed('svc_' || op, st, msg, det, hnt, attempt, 0, total);
  END LOOP;
END`,
  'svc_equality_terms(text, text)': `
DECLARE
  op constant text := 'svc_equality_terms';
  command constant text := 'svc_equality_terms ' || ${b64('policy_code')} || ' ' || ${b64('data')};
  result text[];${ROUND_TRIP_DECLARE}
BEGIN${roundTrip(fetchInto('pg_catalog.array_agg(t.data ORDER BY t.key_version DESC)', 'result', 'key_version integer, data text'))}
  RETURN coalesce(result, '{}');
END`,
  'svc_health()': `
DECLARE
  op constant text := 'svc_health';
  command constant text := 'svc_health';
  result jsonb;${ROUND_TRIP_DECLARE}
BEGIN${roundTrip(fetchInto("pg_catalog.jsonb_build_object('status', t.status, 'service', t.service, 'version', t.version)", 'result',
    'status text, service text, version text'))}
  RETURN result;
END`,
  'svc_engine_info()': `
DECLARE
  op constant text := 'svc_engine_info';
  command constant text := 'svc_info';
  server jsonb;
  result jsonb;${ROUND_TRIP_DECLARE}
BEGIN
  -- Only the address options: a dblink_fdw server cannot hold a password (those live in user mappings).
  SELECT pg_catalog.jsonb_object_agg(o.option_name, o.option_value) INTO server
    FROM pg_catalog.pg_foreign_server s, pg_catalog.pg_options_to_table(s.srvoptions) AS o
   WHERE s.srvname = '${SERVER_NAME}' AND o.option_name IN ('host', 'hostaddr', 'port', 'dbname', 'sslmode', 'connect_timeout');
  ${roundTrip(fetchInto(`pg_catalog.jsonb_build_object('engineVersion', t.engine_version, 'runtimeVersion', t.runtime_version,
                  'policyCount', t.policy_count, 'keyCount', t.key_count, 'configured', t.configured)`, 'result',
    'engine_version text, runtime_version text, policy_count integer, key_count integer, configured boolean'))}
  RETURN pg_catalog.jsonb_build_object(
    'engineServer', '${SERVER_NAME}',
    'engineAddress', coalesce(server, '{}'::jsonb),
    'bridge', 'dblink',
    'timeoutMs', @S@.svc__dblink_setting('svc.timeout_ms', 5000, 3600000),
    'batchSize', @S@.svc__dblink_setting('svc.batch_size', 1000, 10000),
    'health', @S@.svc_health(),
    'runtime', result);
END`,
};

const PINNED = 'SET search_path = pg_catalog, %1$I, pg_temp';
/**
 * Functions that run with client_min_messages at warning: svc_array_send finds out that an idle connection
 * still carries an unread answer (of a send rolled back) by trying to send on it, and dblink reports the
 * refusal as a NOTICE before the function opens the connection again.
 */
const QUIET = new Set(['svc_array_send(text, text[], text)']);

/**
 * PL/pgSQL statements (inside the install DO block, with `target_schema` declared) that create the dblink
 * bridge. Every public function of sql-surface.ts must have a dblink body: a function added there without
 * one fails the build here, so the bridges cannot drift apart.
 */
export function dblinkInstall(dollarQuote: (text: string, tag: string) => string): string {
  const lines: string[] = [];
  lines.push(`    SELECT pg_catalog.quote_ident(n.nspname) INTO dblink_schema
      FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink';`);
  // A bridge installed earlier in another language leaves internal functions that take an address.
  lines.push(...IMPLS.map((f) => `    EXECUTE format('DROP FUNCTION IF EXISTS %I.${f.name}(${f.identity})', target_schema);`));
  // And an earlier version of this bridge, functions it no longer has.
  lines.push(...DBLINK_OBSOLETE.map((f) => `    EXECUTE format('DROP FUNCTION IF EXISTS %I.${f.name}(${f.identity})', target_schema);`));
  // PARALLEL UNSAFE: every call runs EXCEPTION blocks, subtransactions that a parallel plan's leader may
  // not start (see BRIDGE_PARALLEL in install-script.ts).
  const create = (name: string, args: string, returns: string, options: string, body: string) =>
    `    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.${name}(${args}) RETURNS ${returns} LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE ${options} AS %2$L',
      target_schema, replace(replace(${dollarQuote(body, 'dl')}, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));`;
  for (const f of DBLINK_INTERNALS) {
    const impl = INTERNAL_BODIES[`${f.name}(${f.identity})`];
    if (!impl) throw new Error(`no dblink body for ${f.name}(${f.identity})`);
    // No SET clause: only the public functions call them, so they run under their pinned search_path
    // (and every name but an operator's is qualified anyway). A SET clause would cost a save and restore
    // of the setting per call.
    lines.push(create(f.name, impl.args, impl.returns, '', impl.body));
    lines.push(`    EXECUTE format('REVOKE ALL ON FUNCTION %I.${f.name}(${f.identity}) FROM PUBLIC', target_schema);`);
  }
  for (const f of FUNCTIONS) {
    const key = `${f.name}(${f.identity})`;
    const body = PUBLIC_BODIES[key];
    if (!body) throw new Error(`the dblink bridge has no body for ${key}`);
    const options = `${f.strict ? 'STRICT ' : ''}SECURITY DEFINER ${PINNED}${QUIET.has(key) ? ' SET client_min_messages = warning' : ''}`;
    lines.push(create(f.name, f.args, f.returns, options, withCleanErrors(body)));
    lines.push(`    EXECUTE format('COMMENT ON FUNCTION %I.${f.name}(${f.identity}) IS %L', target_schema, ${dollarQuote(f.comment, 'c')});`);
    lines.push(`    EXECUTE format('REVOKE ALL ON FUNCTION %I.${f.name}(${f.identity}) FROM PUBLIC', target_schema);`);
    lines.push(`    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.${f.name}(${f.identity}) TO ${ROLE}', target_schema);`);
  }
  // dblink's own functions are executable by PUBLIC by default; whoever may call them can open a connection
  // named like the bridge's and have values sent wherever it points.
  lines.push(forEachDblinkFunction('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', '    '));
  lines.push(TIMEOUT_OPTIONS_NOTICE);
  return lines.join('\n');
}

/**
 * At install (and re-apply): a NOTICE naming the timeouts the server's options lack. They bound the two waits
 * the bridge cannot (docs/sql.md §1a): dblink's blocking connect, and its blocking send of a large command
 * to an engine that stopped reading, which not even pg_terminate_backend ends.
 */
const TIMEOUT_OPTIONS_NOTICE = `    SELECT pg_catalog.string_agg(o.name, ' and ' ORDER BY o.name) INTO missing_options
      FROM pg_catalog.pg_foreign_server s, (VALUES ('connect_timeout'), ('tcp_user_timeout')) AS o(name)
     WHERE s.srvname = '${SERVER_NAME}'
       AND NOT EXISTS (SELECT FROM pg_catalog.unnest(s.srvoptions) AS v WHERE pg_catalog.split_part(v, '=', 1) = o.name);
    IF missing_options IS NOT NULL THEN
      RAISE NOTICE 'svc bridge: the options of the foreign server ${SERVER_NAME} have no %: without them a connect, or a large command to an engine that stops reading, can hold a session beyond svc.timeout_ms and every cancel', missing_options
        USING HINT = 'ALTER SERVER ${SERVER_NAME} OPTIONS (ADD connect_timeout ''5'', ADD tcp_user_timeout ''10000''), for those missing; see docs/sql.md §1a.';
    END IF;`;

/**
 * A loop (with `ext_function regprocedure` declared) running `statement` for each function of the named
 * extension but those in `except`.
 */
export function forEachExtensionFunction(extension: string, statement: string, indent: string, except: readonly string[] = []): string {
  const skip = except.length > 0 ? ` AND p.proname NOT IN (${except.map((n) => `'${n}'`).join(', ')})` : '';
  return `${indent}FOR ext_function IN
${indent}  SELECT p.oid::regprocedure FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
${indent}    JOIN pg_catalog.pg_proc p ON p.oid = d.objid
${indent}   WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND e.extname = '${extension}'
${indent}     AND d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'${skip}
${indent}LOOP
${indent}  EXECUTE format('${statement}', ext_function);
${indent}END LOOP;`;
}

/** dblink's functions except dblink_connect_u, which dblink itself keeps from PUBLIC. */
function forEachDblinkFunction(statement: string, indent: string): string {
  return forEachExtensionFunction('dblink', statement, indent, ['dblink_connect_u']);
}

/** For the uninstall (with `target_schema` and `ext_function` declared): dblink's functions back to PUBLIC. */
export function dblinkUninstall(): string {
  return `  IF to_regprocedure(format('%I.${DBLINK_MARKER}', target_schema)) IS NOT NULL THEN
${forEachDblinkFunction('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', '    ')}
  END IF;`;
}
