-- Generated from udf/ by `npm run sql -w udf`; do not edit by hand (a test compares this file with the generator).
-- The same objects as sql/migrations, for CREATE EXTENSION svc_bridge [SCHEMA s] and ALTER EXTENSION svc_bridge UPDATE. The bridge
-- language must already be installed (CREATE EXTENSION plpython3u, or dblink or plv8 and http with SET svc.bridge).
\echo Use "ALTER EXTENSION svc_bridge UPDATE" to load this file. \quit
DO $svc_install$
DECLARE
  target_schema text := current_schema();
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
  IF previous IS NULL AND to_regprocedure(format('%I.svc__dblink_connect(text)', target_schema)) IS NOT NULL THEN
    previous := 'dblink';
  END IF;
  IF requested IS NOT NULL AND requested NOT IN ('plpython3u', 'plv8', 'dblink') THEN
    RAISE EXCEPTION 'svc.bridge must be plpython3u, plv8 or dblink, got "%"', requested USING ERRCODE = 'SV003';
  END IF;
  bridge := coalesce(requested, previous, CASE
    WHEN EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = 'plpython3u') THEN 'plpython3u'
    WHEN EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = 'plv8') AND EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'http') THEN 'plv8'
    WHEN EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'dblink') THEN 'dblink'
  END);
  IF bridge IS NULL THEN
    RAISE EXCEPTION 'svc bridge: this database has none of the bridge languages installed: plpython3u, plv8 with http, or dblink'
      USING ERRCODE = 'SV003', HINT = 'Create one first, then CREATE EXTENSION svc_bridge again: CREATE EXTENSION plpython3u; or CREATE EXTENSION dblink; (managed services), or CREATE EXTENSION plv8; CREATE EXTENSION http;. See docs/sql.md.';
  END IF;
  IF bridge = 'plpython3u' AND NOT EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = 'plpython3u') THEN
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
  END IF;
  IF bridge = 'plv8' THEN
    SELECT pg_catalog.quote_ident(n.nspname) INTO http_schema
      FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'http';
  END IF;

  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'svc_user') THEN
    CREATE ROLE svc_user NOLOGIN;
  END IF;
  IF target_schema <> 'public' THEN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO svc_user', target_schema);
  END IF;
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.svc__raise(sqlstate text, message text, detail text, hint text) RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = coalesce(detail, ''), HINT = coalesce(hint, '');
END
$body$$f$, target_schema);
  -- Called by the plv8 bridge, which runs as the owner of the functions: nobody else needs it.
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__raise(text, text, text, text) FROM PUBLIC, svc_user', target_schema);
  IF bridge = 'dblink' THEN
    SELECT pg_catalog.quote_ident(n.nspname) INTO dblink_schema
      FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink';
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__encrypt(text, text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__encrypt_by_name(text, text, integer, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__decrypt(text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__encrypt_array(text[], text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__decrypt_array(text[], text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__rewrap(text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__rewrap_array(text[], text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__array_send(text, text[], text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__array_collect(text, text[], text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__equality_terms(text, text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__health(text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__engine_info(text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_one(text, text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_send(text, text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_many(text, text, integer, integer)', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_setting(name text, fallback integer, max integer) RETURNS integer LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
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
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_setting(text, integer, integer) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_connect(op text, conn text) RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  st text;
  msg text;
  det text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server WHERE srvname = 'svc_engine') THEN
    RAISE EXCEPTION '%: the foreign server svc_engine that holds the engine address does not exist', op USING ERRCODE = 'SV003',
      HINT = 'CREATE SERVER svc_engine FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host ..., port ..., dbname ''svc''), and a user mapping; see docs/sql.md.';
  END IF;
  BEGIN
    PERFORM @D@.dblink_connect(conn, 'svc_engine');
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL;
    IF msg LIKE '%user mapping%' OR det LIKE '%password authentication failed%' OR msg LIKE '%password is required%'
       OR det LIKE '%password is required%' OR det LIKE '%no password supplied%' THEN
      RAISE EXCEPTION '%: the engine refused the credentials of the user mapping for server svc_engine', op
        USING ERRCODE = 'SV003', DETAIL = coalesce(nullif(det, ''), msg),
        HINT = 'Check the user and password in CREATE USER MAPPING FOR <owner of the svc functions> SERVER svc_engine against SVC_PG_USER / SVC_PG_PASSWORD of the engine.';
    END IF;
    RAISE EXCEPTION '%: engine at foreign server svc_engine is unreachable', op
      USING ERRCODE = 'SV002', DETAIL = coalesce(nullif(det, ''), msg),
      HINT = 'Check that the engine runs with SVC_PG_PORT set and that the server options (host, port) point at it.';
  END;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_connect(text, text) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_connect(op text) RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
BEGIN
  PERFORM @S@.svc__dblink_connect(op, 'svc_engine');
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_connect(text) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_failed(op text, st text, msg text, det text, hnt text, attempt integer, item_offset integer, total integer) RETURNS void LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  item text[];
BEGIN
  IF st LIKE '08%' OR st IN ('57P01', '57P02', '57P03', '57P05') THEN
    PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
    IF attempt = 1 THEN RETURN; END IF;
    RAISE EXCEPTION '%: engine at foreign server svc_engine is unreachable', op USING ERRCODE = 'SV002', DETAIL = msg;
  END IF;
  IF 'svc_engine' = ANY (@D@.dblink_get_connections()) THEN
    BEGIN
      PERFORM FROM @D@.dblink_get_result('svc_engine', false) AS t(data text);
    EXCEPTION WHEN OTHERS THEN
      PERFORM @D@.dblink_disconnect('svc_engine');
    END;
  END IF;
  item := pg_catalog.regexp_match(coalesce(det, ''), '^item ([0-9]+) of [0-9]+$');
  IF item IS NOT NULL THEN
    det := pg_catalog.format('item %s of %s', item_offset + item[1]::integer, total);
  ELSIF total > 1 AND st = 'SV001' THEN
    det := pg_catalog.format('item %s of %s', item_offset + 1, total);
  END IF;
  RAISE EXCEPTION USING ERRCODE = st, MESSAGE = msg, DETAIL = coalesce(det, ''), HINT = coalesce(hnt, '');
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_failed(text, text, text, text, text, integer, integer, integer) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_array(op text, head text, data text[]) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  batch integer := @S@.svc__dblink_setting('svc.batch_size', 1000, 10000);
  conns constant text[] := ARRAY['svc_engine', 'svc_engine_2'];
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
  k integer;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
BEGIN
  IF pg_catalog.array_ndims(data) IS NULL THEN RETURN data; END IF;
  IF pg_catalog.array_ndims(data) > 1 THEN
    RAISE EXCEPTION '%: only one-dimensional arrays are supported', op USING ERRCODE = '2202E';
  END IF;
  -- ORDER BY the ordinality costs no sort (the planner knows unnest yields it in order).
  args := ARRAY(SELECT coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(u.v, 'UTF8'), 'base64'), ''), '-') FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  pos := ARRAY(SELECT (u.o + pg_catalog.array_lower(data, 1) - 1)::integer
                 FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  total := pg_catalog.cardinality(args);
  IF total = 0 THEN RETURN out; END IF;
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
  END IF;
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
          IF hi > todo AND pg_catalog.octet_length(command) > 8388608 THEN
            -- Values too large for a full chunk in one command: as many as fit, at least one.
            hi := todo;
            chars := pg_catalog.octet_length(args[todo]);
            WHILE hi < cap AND chars + 1 + pg_catalog.octet_length(args[hi + 1]) <= 8388608 LOOP
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
        IF NOT blocking THEN
          started := pg_catalog.clock_timestamp();
          spin_until := started + interval '0.5 milliseconds';
          WHILE @D@.dblink_is_busy(conns[slot]) = 1 LOOP
            IF pg_catalog.clock_timestamp() > spin_until THEN
              IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
                RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
                  USING ERRCODE = 'SV002';
              END IF;
              PERFORM pg_catalog.pg_sleep(0.001);
              -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
              -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
              FOR poll IN 1..16 LOOP
                EXIT WHEN @D@.dblink_is_busy(conns[slot]) = 0;
              END LOOP;
            END IF;
          END LOOP;
        END IF;
        SELECT pg_catalog.array_agg(t.data ORDER BY t.i) INTO res
        FROM ROWS FROM (@D@.dblink_get_result(conns[slot]) AS (i integer, data text), @D@.dblink_get_result(conns[slot]) AS (end_of_answer text)) AS t;
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
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_array(text, text, text[]) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_ahead_key(fn text, op text, data text[], policy_code text) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
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
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_ahead_key(text, text, text[], text) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_ahead_state() RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
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
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_ahead_state() FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc__dblink_many_head(op text, policy_code text) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE  AS %2$L',
      target_schema, replace(replace($dl$
BEGIN
  RETURN 'svc_' || op || '_many' || CASE WHEN op = 'encrypt' THEN ' ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(policy_code, 'UTF8'), 'base64'), ''), '-') ELSE '' END;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__dblink_many_head(text, text) FROM PUBLIC', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_encrypt(data text, policy_code text) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_encrypt';
  command text;
  result text;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
  command := 'svc_encrypt ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(policy_code, 'UTF8'), 'base64'), ''), '-') || ' ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(data, 'UTF8'), 'base64'), ''), '-');
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT t.data INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (data text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN result;
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt(text, text) IS %L', target_schema, $c$Encrypts a value under a policy code through the engine; NULL in, NULL out.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt(text, text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt(text, text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_encrypt_by_name(data text, policy_name text, policy_version integer DEFAULT NULL) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_encrypt';
  command text;
  result text;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
  IF data IS NULL OR policy_name IS NULL THEN RETURN NULL; END IF;
  command := 'svc_encrypt_by_name ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(policy_name, 'UTF8'), 'base64'), ''), '-') || ' '
    || coalesce(policy_version::text, '-') || ' ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(data, 'UTF8'), 'base64'), ''), '-');
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT t.data INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (data text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN result;
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt_by_name(text, text, integer) IS %L', target_schema, $c$Encrypts a value under a policy name, at policy_version or the latest version when NULL.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt_by_name(text, text, integer) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt_by_name(text, text, integer) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_encrypt(data text, policy_name text, policy_version integer) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_encrypt';
  command text;
  result text;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
  IF data IS NULL OR policy_name IS NULL THEN RETURN NULL; END IF;
  command := 'svc_encrypt_by_name ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(policy_name, 'UTF8'), 'base64'), ''), '-') || ' '
    || coalesce(policy_version::text, '-') || ' ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(data, 'UTF8'), 'base64'), ''), '-');
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT t.data INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (data text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN result;
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt(text, text, integer) IS %L', target_schema, $c$Same as svc_encrypt_by_name: encrypts under a policy name, at policy_version or the latest when NULL.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt(text, text, integer) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt(text, text, integer) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_decrypt(data text) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_decrypt';
  command text;
  result text;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
  command := 'svc_decrypt ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(data, 'UTF8'), 'base64'), ''), '-');
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT t.data INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (data text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN result;
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_decrypt(text) IS %L', target_schema, $c$Decrypts a ciphertext (hub:<policy>:...) through the engine; NULL in, NULL out.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_decrypt(text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_decrypt(text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_encrypt(data text[], policy_code text) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN @S@.svc__dblink_array('svc_encrypt', @S@.svc__dblink_many_head('encrypt', policy_code), data);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt(text[], text) IS %L', target_schema, $c$Encrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt(text[], text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt(text[], text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_decrypt(data text[]) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN @S@.svc__dblink_array('svc_decrypt', @S@.svc__dblink_many_head('decrypt', NULL), data);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_decrypt(text[]) IS %L', target_schema, $c$Decrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_decrypt(text[]) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_decrypt(text[]) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_rewrap(data text) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_rewrap';
  command text;
  result text;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
  command := 'svc_rewrap ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(data, 'UTF8'), 'base64'), ''), '-');
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT t.data INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (data text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN result;
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_rewrap(text) IS %L', target_schema, $c$Re-encrypts a ciphertext under the newest active key version of its own policy's key, inside the engine; unchanged when already there. NULL in, NULL out.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_rewrap(text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_rewrap(text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_rewrap(data text[]) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN @S@.svc__dblink_array('svc_rewrap', @S@.svc__dblink_many_head('rewrap', NULL), data);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_rewrap(text[]) IS %L', target_schema, $c$svc_rewrap for a one-dimensional array, in batch requests of svc.batch_size; order and NULL elements kept.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_rewrap(text[]) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_rewrap(text[]) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_array_send(op text, data text[], policy_code text DEFAULT NULL) RETURNS integer LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp SET client_min_messages = warning AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
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
   WHERE pg_catalog.starts_with(c, 'svc_engine_ahead_') AND NOT idle ? c
     AND NOT EXISTS (SELECT FROM pg_catalog.jsonb_array_elements(pending) AS p WHERE p ->> 'conn' = c);
  IF pg_catalog.jsonb_array_length(idle) > 0 THEN
    conn := idle ->> 0;
    idle := idle - 0;
  ELSE
    conn := 'svc_engine_ahead_' || next_number;
    next_number := next_number + 1;
  END IF;
  args := ARRAY(SELECT coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(u.v, 'UTF8'), 'base64'), ''), '-') FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o);
  total := coalesce(pg_catalog.cardinality(args), 0);
  IF total BETWEEN 1 AND 10000 THEN
    command := @S@.svc__dblink_many_head(op, policy_code) || ' ' || pg_catalog.array_to_string(args, ' ');
    IF pg_catalog.octet_length(command) <= 8388608 THEN
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
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_array_send(text, text[], text) IS %L', target_schema, $c$Sends an array ahead to the engine (op 'encrypt' with a policy code, 'decrypt' or 'rewrap') and returns at once, with the number of values sent; svc_array_collect with the same arguments returns the results. Two arrays pending per session: a third send discards the oldest.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_array_send(text, text[], text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_array_send(text, text[], text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_array_collect(op text, data text[], policy_code text DEFAULT NULL) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
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
  k integer;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
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
  total := pg_catalog.cardinality(pos);
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
  END IF;
  FOR attempt IN 1..2 LOOP
    BEGIN
      IF NOT coalesce(conn = ANY (@D@.dblink_get_connections()), false) THEN
        PERFORM @S@.svc__dblink_connect('svc_array_collect', conn);
        IF @D@.dblink_send_query(conn, head || ' ' || pg_catalog.array_to_string(ARRAY(
             SELECT coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(u.v, 'UTF8'), 'base64'), ''), '-') FROM pg_catalog.unnest(data) WITH ORDINALITY AS u(v, o) WHERE u.v IS NOT NULL ORDER BY u.o), ' ')) <> 1 THEN
          RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
        END IF;
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy(conn) = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              RAISE EXCEPTION 'svc_array_collect: engine at foreign server ${SERVER_NAME} did not answer within svc.timeout_ms (% ms)', timeout_ms
                USING ERRCODE = 'SV002';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy(conn) = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      SELECT pg_catalog.array_agg(t.data ORDER BY t.i) INTO res
        FROM ROWS FROM (@D@.dblink_get_result(conn) AS (i integer, data text), @D@.dblink_get_result(conn) AS (end_of_answer text)) AS t;
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
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_array_collect(text, text[], text) IS %L', target_schema, $c$The results of the array svc_array_send sent ahead with the same arguments, as the array forms return them (order and NULL elements kept); 55000 when the session sent no such array.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_array_collect(text, text[], text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_array_collect(text, text[], text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_equality_terms(data text, policy_code text) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_equality_terms';
  command constant text := 'svc_equality_terms ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(policy_code, 'UTF8'), 'base64'), ''), '-') || ' ' || coalesce(nullif(pg_catalog.encode(pg_catalog.convert_to(data, 'UTF8'), 'base64'), ''), '-');
  result text[];
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT pg_catalog.array_agg(t.data ORDER BY t.key_version DESC) INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (key_version integer, data text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN coalesce(result, '{}');
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_equality_terms(text, text) IS %L', target_schema, $c$The ciphertexts of a value under every key version of a deterministic policy that can still decrypt, newest first: WHERE col = ANY ((SELECT svc_equality_terms(v, p))::text[]).$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_equality_terms(text, text) FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_equality_terms(text, text) TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_health() RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_health';
  command constant text := 'svc_health';
  result jsonb;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT pg_catalog.jsonb_build_object('status', t.status, 'service', t.service, 'version', t.version) INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (status text, service text, version text), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN result;
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_health() IS %L', target_schema, $c$The engine's GET /api/health answer; raises SV002 when the engine cannot be reached.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_health() FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_health() TO svc_user', target_schema);
    EXECUTE format('CREATE OR REPLACE FUNCTION %1$I.svc_engine_info() RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS %2$L',
      target_schema, replace(replace($dl$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
  op constant text := 'svc_engine_info';
  command constant text := 'svc_info';
  server jsonb;
  result jsonb;
  st text;
  msg text;
  det text;
  hnt text;
  setting text;
  timeout_ms integer;
  started timestamptz;
  spin_until timestamptz;
  blocking boolean;
  timed_out boolean := false;
BEGIN
  -- Only the address options: a dblink_fdw server cannot hold a password (those live in user mappings).
  SELECT pg_catalog.jsonb_object_agg(o.option_name, o.option_value) INTO server
    FROM pg_catalog.pg_foreign_server s, pg_catalog.pg_options_to_table(s.srvoptions) AS o
   WHERE s.srvname = 'svc_engine' AND o.option_name IN ('host', 'hostaddr', 'port', 'dbname', 'sslmode', 'connect_timeout');
  
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
  END IF;
  FOR attempt IN 1..2 LOOP
    IF NOT coalesce('svc_engine' = ANY (@D@.dblink_get_connections()), false) THEN
      PERFORM @S@.svc__dblink_connect(op);
    END IF;
    BEGIN
      IF @D@.dblink_send_query('svc_engine', command) <> 1 THEN
        -- The connection broke while idle: handled as a broken connection below (one new connection).
        RAISE EXCEPTION 'the command could not be sent' USING ERRCODE = 'connection_failure';
      END IF;
      IF NOT blocking THEN
        started := pg_catalog.clock_timestamp();
        spin_until := started + interval '0.5 milliseconds';
        WHILE @D@.dblink_is_busy('svc_engine') = 1 LOOP
          IF pg_catalog.clock_timestamp() > spin_until THEN
            IF pg_catalog.clock_timestamp() - started >= timeout_ms * interval '1 millisecond' THEN
              -- The answer may still come; closing the connection makes sure it is never read as another's.
              PERFORM @D@.dblink_disconnect('svc_engine');
              timed_out := true;
              EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
            -- libpq takes in one socket read per poll, and a large answer waits in the socket for the next:
            -- a burst of polls takes in what arrived during the sleep, so the engine can write the rest.
            FOR poll IN 1..16 LOOP
              EXIT WHEN @D@.dblink_is_busy('svc_engine') = 0;
            END LOOP;
          END IF;
        END LOOP;
      END IF;
      EXIT WHEN timed_out;
      -- The second function returns no row: it takes the end of the answer, so the connection is free again.
      SELECT pg_catalog.jsonb_build_object('engineVersion', t.engine_version, 'runtimeVersion', t.runtime_version,
                  'policyCount', t.policy_count, 'keyCount', t.key_count, 'configured', t.configured) INTO result
        FROM ROWS FROM (@D@.dblink_get_result('svc_engine') AS (engine_version text, runtime_version text, policy_count integer, key_count integer, configured boolean), @D@.dblink_get_result('svc_engine') AS (end_of_answer text)) AS t;
      EXIT;
    EXCEPTION
      WHEN query_canceled THEN
        PERFORM @D@.dblink_disconnect('svc_engine') WHERE 'svc_engine' = ANY (@D@.dblink_get_connections());
        RAISE;
      WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st := RETURNED_SQLSTATE, msg := MESSAGE_TEXT, det := PG_EXCEPTION_DETAIL, hnt := PG_EXCEPTION_HINT;
    END;
    PERFORM @S@.svc__dblink_failed(op, st, msg, det, hnt, attempt, 0, 1);
  END LOOP;
  IF timed_out THEN
    RAISE EXCEPTION '%: engine at foreign server svc_engine did not answer within svc.timeout_ms (% ms)', op, timeout_ms
      USING ERRCODE = 'SV002';
  END IF;
  RETURN pg_catalog.jsonb_build_object(
    'engineServer', 'svc_engine',
    'engineAddress', coalesce(server, '{}'::jsonb),
    'bridge', 'dblink',
    'timeoutMs', @S@.svc__dblink_setting('svc.timeout_ms', 5000, 3600000),
    'batchSize', @S@.svc__dblink_setting('svc.batch_size', 1000, 10000),
    'health', @S@.svc_health(),
    'runtime', result);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$dl$, '@S@', quote_ident(target_schema)), '@D@', dblink_schema));
    EXECUTE format('COMMENT ON FUNCTION %I.svc_engine_info() IS %L', target_schema, $c$The engine address and bridge settings in effect, the engine health and, when readable, its runtime info.$c$);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_engine_info() FROM PUBLIC', target_schema);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_engine_info() TO svc_user', target_schema);
    FOR ext_function IN
      SELECT p.oid::regprocedure FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
        JOIN pg_catalog.pg_proc p ON p.oid = d.objid
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND e.extname = 'dblink'
         AND d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e' AND p.proname NOT IN ('dblink_connect_u')
    LOOP
      EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', ext_function);
    END LOOP;
    SELECT pg_catalog.string_agg(o.name, ' and ' ORDER BY o.name) INTO missing_options
      FROM pg_catalog.pg_foreign_server s, (VALUES ('connect_timeout'), ('tcp_user_timeout')) AS o(name)
     WHERE s.srvname = 'svc_engine'
       AND NOT EXISTS (SELECT FROM pg_catalog.unnest(s.srvoptions) AS v WHERE pg_catalog.split_part(v, '=', 1) = o.name);
    IF missing_options IS NOT NULL THEN
      RAISE NOTICE 'svc bridge: the options of the foreign server svc_engine have no %: without them a connect, or a large command to an engine that stops reading, can hold a session beyond svc.timeout_ms and every cancel', missing_options
        USING HINT = 'ALTER SERVER svc_engine OPTIONS (ADD connect_timeout ''5'', ADD tcp_user_timeout ''10000''), for those missing; see docs/sql.md §1a.';
    END IF;
  ELSE
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_setting(text, integer, integer)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_connect(text, text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_connect(text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_failed(text, text, text, text, text, integer, integer, integer)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_array(text, text, text[])', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_ahead_key(text, text, text[], text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_ahead_state()', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_many_head(text, text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_one(text, text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_send(text, text)', target_schema);
    EXECUTE format('DROP FUNCTION IF EXISTS %I.svc__dblink_many(text, text, integer, integer)', target_schema);
  py_prelude := replace($py$b = GD.get('svc_bridge:527de2bf1b62')
if b is None:
    import base64, types
    m = types.ModuleType('svc_bridge')
    exec(compile(base64.b64decode('@MODULE_B64@').decode('utf-8'), 'svc_bridge.py', 'exec'), m.__dict__)
    b = GD['svc_bridge:527de2bf1b62'] = m.Bridge(plpy)
$py$, '@MODULE_B64@',
    translate(encode(convert_to($svc_python_module$# The PL/Python side of the database bridge: turns svc_encrypt / svc_decrypt calls into binary-frame
# requests to the engine's batch endpoints (docs/binary-frame.md), or, with the server option wire_url, into
# commands on the engine's PostgreSQL wire endpoint (docs/pgwire.md). It is loaded once per backend (the
# generated SQL executes this source and keeps the Bridge in GD), keeps one keep-alive connection per
# backend, reopens it once when a reused connection turns out to be broken, and reports every failure as an
# SQL error with a documented SQLSTATE (docs/sql.md). It never puts data values into messages.
#
# The per-row path is kept lean because it runs once per row: the settings are looked up once per statement and
# reused while unchanged (config), and the HTTP exchange is a few bytes written and read on a raw socket
# (no http.client, no header parsing beyond Content-Length and Connection), with no JSON either way.
#
# The engine address is the options of the foreign server svc_engine (the DBA's). The bridge reads them
# itself, as the owner of the functions, once per statement: the SQL wrapper passes `cfg` = [the statement's
# start time, svc.timeout_ms, svc.batch_size], a simple expression that costs no query per row, and the
# server is looked up again when the statement changes (a new statement sees an ALTER SERVER, as a query
# would). No function takes an address as an argument. The lookup is a plpy.execute, which PL/Python runs in
# a subtransaction: the functions are PARALLEL UNSAFE, so no parallel plan (where subtransactions are
# refused) runs them; for the same reason only a non-worker backend polls for interrupts.
import base64
import json
import re
import select
import socket
import ssl
import struct
import time
from urllib.parse import urlsplit

ITEM_FAILED = 'SV001'  # the engine refused an item (or the request): unknown policy, bad ciphertext, ...
UNAVAILABLE = 'SV002'  # the engine could not be reached, timed out, or answered something unusable
CONFIG = 'SV003'  # the engine address (server svc_engine) or a svc.* setting is missing or invalid

# The one place that holds the engine address, and the foreign-data wrapper it must be on (docs/sql.md §2).
SERVER = 'svc_engine'
BRIDGE_FDW = 'svc_bridge_fdw'
SERVER_HINT = ("CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url 'http://127.0.0.1:8080') "
               'as a superuser or the owner of the svc functions; see docs/sql.md.')

DEFAULT_TIMEOUT_MS = 5000
MAX_TIMEOUT_MS = 3600000
DEFAULT_BATCH_SIZE = 1000
MAX_BATCH_SIZE = 10000
# Bytes of data per request: large values go in smaller requests so bodies stay well under the engine's limit.
MAX_REQUEST_DATA_BYTES = 2 * 1024 * 1024
# The largest answer read: requests carry at most 2 MiB of data (or one value up to the engine's limit), so
# their answers are far smaller; a bigger Content-Length is not the engine answering this bridge.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
# While waiting for an answer, wake up this often to let PostgreSQL process a cancel or statement_timeout.
INTERRUPT_SLICE_S = 0.05
# Connections per transport and backend: an array of several chunks keeps one chunk in flight on each of
# lanes 0 and 1; lanes 2 and 3 each carry an array svc_array_send sent ahead, so calls in between (a
# trigger's, say) neither disturb nor read their answers.
AHEAD_LANES = (2, 3)
CONNECTIONS = 4
# Values in one request of an array sent ahead: the engine's default batch limit (SVC_BATCH_MAX_ITEMS).
AHEAD_REQUEST_VALUES = 10000
ARRAY_OPS = ('encrypt', 'decrypt', 'rewrap')
NOT_SENT_AHEAD = '55000'  # svc_array_collect without a matching svc_array_send
NOT_ONE_DIMENSIONAL = '2202E'  # array_subscript_error, as the dblink bridge raises it

# The binary frame, version 1 (docs/binary-frame.md); integers big-endian.
MAGIC = b'SVCF'
FRAME_VERSION = 1
FRAME_OPS = {'encrypt': 0x01, 'decrypt': 0x02, 'rewrap': 0x03}  # a result frame's operation is this | 0x80
FRAME_HEADER = struct.Struct('>4sBBHI')  # magic, version, operation, reserved, item count
RESULT_HEADER = struct.Struct('>4sBBHIIII')  # ... and totalSuccess, totalFailed, totalProcessingTime
RESULT_ITEM = struct.Struct('>HHH')  # code, status, policy code length (then the code, data length, data)
ENCRYPT_HEAD = struct.Struct('>BIH')  # policy kind, policy version, reference length (then the reference)
U32 = struct.Struct('>I')
POLICY_CODE = 0x01
POLICY_NAME = 0x02
ITEM_SUCCESS = 1000
FRAME_REQUEST_HEADERS = 'Content-Type: application/x-svc-binary-frame\r\nContent-Length: %d\r\n'

ENGINE_CHECK_HINT = 'Check the engine directly (GET <url of server svc_engine>/api/health and one POST /api/encrypt); if it works there, the problem is between PostgreSQL and the engine.'
# The server's foreign-data wrapper and options (see name_values).
SERVER_LOOKUP = ('SELECT w.fdwname::text AS wrapper, s.srvoptions AS options FROM pg_catalog.pg_foreign_server s '
                 'JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw WHERE s.srvname = $1')
# The options of the user mapping of the functions' owner (the current user inside the SECURITY DEFINER
# wrappers): the tenant id (a credential of the operations API), and the user and password of the wire
# endpoint. pg_user_mappings shows them to that role and superusers only.
MAPPING_LOOKUP = 'SELECT m.umoptions AS options FROM pg_catalog.pg_user_mappings m WHERE m.srvname = $1 AND m.usename = CURRENT_USER'
WIRE_MAPPING_HINT = ("CREATE USER MAPPING FOR <owner of the svc functions> SERVER svc_engine OPTIONS (user 'svc', password '...') "
                     'with SVC_PG_USER / SVC_PG_PASSWORD of the engine; see docs/sql.md.')
WIRE_CHECK_HINT = 'Check that the engine runs with SVC_PG_PORT set and that option wire_url of the server svc_engine points at it.'
# Connection parameters that are credentials: they belong in the owner's user mapping, not in wire_url,
# which every role can read.
WIRE_CREDENTIALS = ('user', 'password', 'sslpassword')
ITEM_DETAIL = re.compile(r'^item ([0-9]+) of [0-9]+$')
# Connection states after which the wire connection is dropped (and a reused one reopened once).
WIRE_BROKEN = ('57P01', '57P02', '57P03', '57P05')


class Unavailable(Exception):
    """The deadline passed while waiting for the engine's answer."""


class LaneRefused(Exception):
    """The second connection of a transport could not be opened."""


class Ahead:
    """An array svc_array_send sent: its arguments, the positions and UTF-8 bytes of its non-NULL values, its
    lane, the settings it was sent with and, when a request went, ((start, end) of the values it carries,
    the pending exchange, its connection)."""
    __slots__ = ('op', 'policy_code', 'values', 'positions', 'data', 'lane', 'settings', 'sent')

    def __init__(self, op, policy_code, values, positions, data, lane):
        self.op = op
        self.policy_code = policy_code
        self.values = values
        self.positions = positions
        self.data = data
        self.lane = lane
        self.settings = None
        self.sent = None


class Settings:
    # ops: the operations API's endpoint (a Settings of its own; this one when the server has no ops_url).
    # wire: the libpq connection string of the engine's wire endpoint (option wire_url), or None for HTTP.
    __slots__ = ('url', 'scheme', 'host', 'port', 'base_path', 'timeout_s', 'timeout_ms', 'batch_size', 'ops', 'wire')


class Bridge:
    def __init__(self, plpy, language='plpython3u'):
        self.plpy = plpy
        self.language = language
        # Executing any statement runs PostgreSQL's interrupt check (cancel, statement_timeout); prepared on
        # first use, and never in a parallel worker, where a worker's wait is bounded by svc.timeout_ms.
        self.tick_plan = None
        self.parallel_worker = in_parallel_worker()
        # Connections of each transport ("lanes", see CONNECTIONS): a call uses lane 0; an array of several
        # chunks keeps one chunk in flight on lanes 0 and 1, so the backend prepares and reads one while the
        # engine works on the other; an array sent ahead waits on lane 2 or 3.
        self.socks = [None] * CONNECTIONS
        self.sock_keys = [None] * CONNECTIONS
        self.tls = None
        self.config_key = None
        self.config_value = None
        self.plans = {}
        self.wire_conns = [None] * CONNECTIONS
        self.wire_keys = [None] * CONNECTIONS
        self.pg_module = None
        # The arrays sent ahead and not yet collected (Ahead), oldest first.
        self.ahead = []

    # ---- settings -------------------------------------------------------------------------------

    def settings(self, cfg):
        """cfg = [statement start, svc.timeout_ms, svc.batch_size]; the address from the server svc_engine's options."""
        _, timeout_ms, batch_size = (list(cfg or []) + [None] * 3)[:3]
        rows = self.plpy.execute(self.plan('server', SERVER_LOOKUP), [SERVER])
        if len(rows) == 0:
            self.fail(CONFIG, 'the foreign server %s that holds the engine address does not exist' % SERVER, hint=SERVER_HINT)
        wrapper = rows[0]['wrapper']
        if wrapper != BRIDGE_FDW:
            # A server of the dblink bridge (dblink_fdw) names a PostgreSQL wire endpoint, not an HTTP one.
            self.fail(CONFIG, 'the foreign server %s is on the foreign-data wrapper %s, not %s' % (SERVER, wrapper, BRIDGE_FDW),
                      hint='Drop it and ' + SERVER_HINT)
        options = name_values(rows[0]['options'])
        url, ops_url, wire = options.get('url'), options.get('ops_url'), options.get('wire_url')
        if url is None or url.strip() == '':
            self.fail(CONFIG, 'the foreign server %s has no option url' % SERVER,
                      hint="ALTER SERVER svc_engine OPTIONS (ADD url 'http://127.0.0.1:8080'); see docs/sql.md.")
        s = self.endpoint(url, 'url')
        s.wire = self.wire_dsn(wire) if wire is not None and wire.strip() != '' else None
        s.timeout_ms = self.integer(timeout_ms, 'svc.timeout_ms', DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
        s.timeout_s = s.timeout_ms / 1000.0
        s.batch_size = self.integer(batch_size, 'svc.batch_size', DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE)
        s.ops = s
        if ops_url is not None and ops_url.strip() != '':
            s.ops = self.endpoint(ops_url, 'ops_url')
            s.ops.timeout_ms, s.ops.timeout_s, s.ops.batch_size = s.timeout_ms, s.timeout_s, s.batch_size
            s.ops.ops, s.ops.wire = s.ops, None
        return s

    def wire_dsn(self, dsn):
        """Option wire_url: a libpq connection string (URI or key=value) without credentials, which belong in
        the owner's user mapping (server options are readable by every role)."""
        psycopg2 = self.psycopg2()
        try:
            params = psycopg2.extensions.parse_dsn(dsn.strip())
        except psycopg2.ProgrammingError:
            self.fail(CONFIG, 'option wire_url of the foreign server %s is not a libpq connection string' % SERVER,
                      hint="ALTER SERVER svc_engine OPTIONS (SET wire_url 'postgresql://127.0.0.1:5433/svc'); see docs/sql.md.")
        if any(name in params for name in WIRE_CREDENTIALS):
            self.fail(CONFIG, 'option wire_url of the foreign server %s must not hold a user or password' % SERVER, hint=WIRE_MAPPING_HINT)
        return dsn.strip()

    def psycopg2(self):
        """The psycopg2 module, imported on first use (only the wire transport needs it)."""
        if self.pg_module is None:
            try:
                import psycopg2
                import psycopg2.extensions
            except ImportError:
                self.fail(CONFIG, 'option wire_url of the foreign server %s needs psycopg2 in the Python of the PostgreSQL server' % SERVER,
                          hint='Install it (Debian and Ubuntu: apt-get install python3-psycopg2), or drop the option wire_url to use url.')
            self.pg_module = psycopg2
        return self.pg_module

    def mapping(self):
        """The options of the owner's user mapping for the server (tenant_id; user and password for the wire)."""
        rows = self.plpy.execute(self.plan('mapping', MAPPING_LOOKUP), [SERVER])
        return name_values(rows[0]['options'] if len(rows) > 0 else None)

    def tenant_id(self):
        return self.mapping().get('tenant_id') or None

    def plan(self, name, query):
        """A statement prepared once per backend."""
        plan = self.plans.get(name)
        if plan is None:
            plan = self.plans[name] = self.plpy.prepare(query, ['text'])
        return plan

    def endpoint(self, url, option):
        """An address option of the server (url, ops_url) parsed into a Settings without the tuning values."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ('http', 'https') or not parts.hostname or parts.query or parts.fragment:
            self.fail(CONFIG, 'option %s of the foreign server %s must be an http:// or https:// URL without query, got "%s"'
                      % (option, SERVER, url))
        try:
            port = parts.port
        except ValueError:
            self.fail(CONFIG, 'option %s of the foreign server %s has an invalid port: "%s"' % (option, SERVER, url))
        s = Settings()
        s.url = url.strip().rstrip('/')
        s.scheme = parts.scheme
        s.host = parts.hostname
        s.port = port or (443 if parts.scheme == 'https' else 80)
        s.base_path = parts.path.rstrip('/')
        return s

    def config(self, cfg):
        """settings(cfg), looked up again only in a new statement or when a setting changed (cfg arrives on every call)."""
        key = tuple(cfg) if cfg is not None else None
        if self.config_value is None or key != self.config_key:
            self.config_value = self.settings(cfg)
            self.config_key = key
            # A wire connection to an endpoint the server no longer names is not kept open.
            if any(c is not None for c in self.wire_conns) and self.wire_keys[0] != self.config_value.wire:
                self.wire_close()
        return self.config_value

    def integer(self, raw, name, default, maximum):
        if raw is None or raw.strip() == '':
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value < 1 or value > maximum:
            self.fail(CONFIG, '%s must be an integer from 1 to %d, got "%s"' % (name, maximum, raw))
        return value

    # ---- the SQL functions -------------------------------------------------------------------------

    def encrypt(self, cfg, data, policy_code):
        return self.run_one(cfg, 'encrypt', data, self.policy(POLICY_CODE, policy_code, None))

    def encrypt_by_name(self, cfg, data, policy_name, policy_version):
        return self.run_one(cfg, 'encrypt', data, self.policy(POLICY_NAME, policy_name, policy_version))

    def decrypt(self, cfg, data):
        return self.run_one(cfg, 'decrypt', data, None)

    def encrypt_array(self, cfg, values, policy_code):
        return self.run_array(cfg, 'encrypt', values, self.policy(POLICY_CODE, policy_code, None))

    def decrypt_array(self, cfg, values):
        return self.run_array(cfg, 'decrypt', values, None)

    def policy(self, kind, reference, version):
        """An encrypt call's policy (kind, reference, version), the same for every value of the call."""
        # The frame says "no version" with 0 and the wire with "-"; JSON let the engine refuse these.
        if version is not None and not 1 <= version <= 0xFFFFFFFF:
            self.fail(ITEM_FAILED, 'svc_encrypt: policyVersion must be a positive integer')
        return (kind, reference or '', version)

    def rewrap(self, cfg, data):
        # A rewrap item has a decrypt item's layout: the ciphertext alone (docs/binary-frame.md).
        return self.run_one(cfg, 'rewrap', data, None)

    def rewrap_array(self, cfg, values):
        return self.run_array(cfg, 'rewrap', values, None)

    def equality_terms(self, cfg, data, policy_code):
        s = self.config(cfg)
        if s.wire is not None:
            rows = self.wire_query(s, 'svc_equality_terms', 'svc_equality_terms %s %s' % (b64(policy_code.encode('utf-8')), b64(data.encode('utf-8'))))
            return [row[1] for row in rows]
        path = '/api/equality-terms'
        answer = self.post_json(s, 'equality_terms', path, {'data': data, 'policyCode': policy_code})
        terms = answer.get('terms')
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s without terms' % (s.url, path), hint=ENGINE_CHECK_HINT)
        return terms

    def health(self, cfg):
        s = self.config(cfg)
        if s.wire is not None:
            status, service, version = self.wire_query(s, 'svc_health', 'svc_health')[0]
            return json.dumps({'status': status, 'service': service, 'version': version})
        status, body = self.exchange(s, 'GET', '/api/health', None, '')
        if status != 200:
            self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d to GET /api/health' % (s.url, status), hint=ENGINE_CHECK_HINT)
        return body.decode('utf-8')

    def engine_info(self, cfg):
        s = self.config(cfg)
        info = {
            'engineServer': SERVER,
            'engineUrl': s.url,
            'opsUrl': s.ops.url,
            'wireUrl': s.wire,
            'bridge': self.language,
            'timeoutMs': s.timeout_ms,
            'batchSize': s.batch_size,
            'health': json.loads(self.health(cfg)),
        }
        # The operations API may have its own listener (the server's ops_url); the tenant id is its credential.
        tenant_id = self.tenant_id()
        headers = 'X-SVC-Tenant-Id: %s\r\n' % tenant_id if tenant_id else ''
        status, body = self.exchange(s.ops, 'GET', '/engine/api/v1/runtime/info', None, headers)
        if status == 200:
            info['runtime'] = json.loads(body)
        else:
            info['runtime'] = None
            info['runtimeStatus'] = status
        return json.dumps(info)

    # ---- batching ---------------------------------------------------------------------------------
    # Over HTTP, every call, one row or an array, is a binary frame (docs/binary-frame.md): items are the UTF-8
    # bytes of the values behind the encrypt item's policy fields (none for decrypt and rewrap), results are
    # read with struct, and no JSON is built or parsed on the way. Over the wire endpoint, a row is one
    # command and an array chunk one *_many command (docs/pgwire.md), the values in base64.

    def run_one(self, cfg, op, value, policy):
        s = self.config(cfg)
        data = value.encode('utf-8')
        if s.wire is not None:
            return self.wire_batch(s, op, policy, [data], 0, 1, False)[0]
        return self.post_batch(s, op, self.policy_head(policy), [data], 0, 1)[0]

    def run_array(self, cfg, op, values, policy):
        if values is None:
            return None
        out, positions, data = self.array_values('svc_' + op, values)
        if not data:
            return out
        s = self.config(cfg)
        send, finish = self.transport(s, op, policy, data)
        self.run_chunks(send, finish, self.chunks(data, 0, s.batch_size), out, positions)
        return out

    def array_send(self, cfg, op, values, policy_code):
        """svc_array_send: the non-NULL values in one request on an ahead lane of their own, sent without
        waiting (what does not fit in one request is left for array_collect). Two arrays can be ahead at once;
        a third send discards the oldest. Returns the number of non-NULL values."""
        policy = self.ahead_policy('svc_array_send', op, policy_code)
        _, positions, data = self.array_values('svc_array_send', values)
        if len(self.ahead) == len(AHEAD_LANES):
            # The oldest answer may still be on its way: its connection is not reused.
            self.drop_ahead(self.ahead.pop(0))
        busy = [a.lane for a in self.ahead]
        ahead = Ahead(op, policy_code, values, positions, data, [lane for lane in AHEAD_LANES if lane not in busy][0])
        if data:
            s = ahead.settings = self.config(cfg)
            send, _ = self.transport(s, op, policy, data)
            chunk = self.chunks(data, 0, AHEAD_REQUEST_VALUES)[0]
            pending = self.open_lane(send, ahead.lane, chunk)
            if pending is not None:
                ahead.sent = (chunk, pending, self.lane_connection(s, ahead.lane))
        self.ahead.append(ahead)
        return len(data)

    def array_collect(self, cfg, op, values, policy_code):
        """svc_array_collect: the results of the array array_send sent with the same arguments."""
        policy = self.ahead_policy('svc_array_collect', op, policy_code)
        ahead = next((a for a in self.ahead if a.op == op and a.policy_code == policy_code and a.values == values), None)
        if ahead is None:
            self.fail(NOT_SENT_AHEAD, 'svc_array_collect: this session has no array sent ahead with these arguments',
                      hint='Call svc_array_send with the same arguments first.')
        self.ahead.remove(ahead)
        # The values are the ones sent: their positions and bytes were worked out then.
        positions, data = ahead.positions, ahead.data
        out = list(values) if values is not None else None
        if not data:
            return out
        s = ahead.settings
        send, finish = self.transport(s, op, policy, data)
        rest = 0
        if ahead.sent is not None:
            chunk, pending, connection = ahead.sent
            try:
                if self.lane_connection(s, ahead.lane) is not connection:
                    # A failure elsewhere closed the connection since: the answer is lost, the values are here.
                    pending = send(ahead.lane, chunk)
                # The wait counts from now: the caller's own work since the send is not the engine's delay.
                pending[1] = time.monotonic() + s.timeout_s
                if pending[-1] is False:
                    # The values are here: an answer lost to a connection that broke meanwhile is asked for
                    # again once, as on a reused connection.
                    pending[-1] = True
                for i, value in zip(positions[chunk[0]:chunk[1]], finish(ahead.lane, chunk, pending)):
                    out[i] = value
            except BaseException:
                self.drop_ahead(ahead)
                raise
            rest = chunk[1]
        if rest < len(data):
            self.run_chunks(send, finish, self.chunks(data, rest, s.batch_size), out, positions)
        return out

    def drop_ahead(self, ahead):
        self.close(ahead.lane)
        self.wire_close(ahead.lane)

    def array_values(self, name, values):
        """(a copy of values to place results in, the positions of its non-NULL values, their UTF-8 bytes).
        PL/Python passes a multi-dimensional array as nested lists."""
        if values is None:
            return None, [], []
        out = list(values)
        positions = [i for i, v in enumerate(out) if v is not None]
        if any(isinstance(out[i], list) for i in positions):
            self.fail(NOT_ONE_DIMENSIONAL, '%s: only one-dimensional arrays are supported' % name)
        return out, positions, [out[i].encode('utf-8') for i in positions]

    def ahead_policy(self, name, op, policy_code):
        """The policy of an array sent ahead (None for decrypt and rewrap), or 22023 for arguments that do not fit."""
        if op not in ARRAY_OPS:
            self.fail('22023', "%s: op must be 'encrypt', 'decrypt' or 'rewrap'" % name)
        if op == 'encrypt':
            if policy_code is None:
                self.fail('22023', '%s: encrypt needs a policy code' % name)
            return self.policy(POLICY_CODE, policy_code, None)
        if policy_code is not None:
            self.fail('22023', '%s: %s takes no policy code' % (name, op))
        return None

    def lane_connection(self, s, lane):
        return self.socks[lane] if s.wire is None else self.wire_conns[lane]

    def chunks(self, data, start, limit):
        """(start, end) ranges of data from `start`: a request closes at `limit` values or at the byte budget
        (one oversized value goes alone)."""
        chunks = []
        total = len(data)
        while start < total:
            end = start
            size = 0
            while end < total and end - start < limit:
                n = len(data[end])
                if end > start and size + n > MAX_REQUEST_DATA_BYTES:
                    break
                size += n
                end += 1
            chunks.append((start, end))
            start = end
        return chunks

    def transport(self, s, op, policy, data):
        """send(lane, chunk) -> pending and finish(lane, chunk, pending) -> result texts, for chunks of `data`
        over the server's transport; errors name items over the whole of `data`."""
        total = len(data)
        if s.wire is not None:
            send = lambda lane, c: self.wire_send(s, lane, self.wire_command(op, policy, data[c[0]:c[1]], True))
            finish = lambda lane, c, pending: self.wire_results(s, op, data[c[0]:c[1]], self.wire_finish(s, lane, 'svc_' + op, pending, c[0], total), True)
        else:
            head = self.policy_head(policy)
            send = lambda lane, c: self.http_send(s, lane, self.frame_request(s, op, head, data[c[0]:c[1]]))
            finish = lambda lane, c, pending: self.frame_results(s, op, c[1] - c[0], self.http_finish(s, lane, pending), c[0], total)
        return send, finish

    def run_chunks(self, send, finish, chunks, out, positions):
        """The chunks over lanes 0 and 1, their results placed in `out` at `positions`."""
        # One chunk in flight on each lane: chunk k goes on lane k % lanes, and is sent when chunk k - lanes
        # has been read. Any failure closes every lane, so no answer still on its way is read as another call's.
        lanes = 1
        pending = [send(0, chunks[0])]
        try:
            if len(chunks) > 1:
                second = self.open_lane(send, 1, chunks[1])
                if second is not None:
                    lanes = 2
                    pending.append(second)
            for k, chunk in enumerate(chunks):
                lane = k % lanes
                results = finish(lane, chunk, pending[k])
                if k + lanes < len(chunks):
                    pending.append(send(lane, chunks[k + lanes]))
                for i, value in zip(positions[chunk[0]:chunk[1]], results):
                    out[i] = value
        except BaseException:
            if lanes > 1:
                # The other lane's chunk may still be on its way.
                self.close()
                self.wire_close()
            raise

    def open_lane(self, send, lane, chunk):
        """`chunk` sent on `lane`; None when that connection cannot be opened (the engine's connection limit,
        say): the array then goes on over the lanes already open."""
        try:
            return send(lane, chunk)
        except LaneRefused:
            return None

    def policy_head(self, policy):
        """The fields before an encrypt item's data length in a frame (none for decrypt and rewrap)."""
        if policy is None:
            return b''
        kind, reference, version = policy
        ref = reference.encode('utf-8')
        if len(ref) > 0xFFFF:
            self.fail(ITEM_FAILED, 'svc_encrypt: the policy reference is longer than 65535 bytes')
        return ENCRYPT_HEAD.pack(kind, version or 0, len(ref)) + ref

    def post_batch(self, s, op, head, data, offset, total):
        """One frame of len(data) items of operation `op`; returns the result texts in order or fails."""
        request = self.frame_request(s, op, head, data)
        return self.frame_results(s, op, len(data), self.http_finish(s, 0, self.http_send(s, 0, request)), offset, total)

    def frame_request(self, s, op, head, data):
        """The HTTP request of one frame of len(data) items of operation `op`."""
        count = len(data)
        parts = [FRAME_HEADER.pack(MAGIC, FRAME_VERSION, FRAME_OPS[op], 0, count)]
        if count == 1:
            parts += (head, U32.pack(len(data[0])), data[0])
        else:
            for d in data:
                parts += (head, U32.pack(len(d)), d)
        body = b''.join(parts)
        return self.request(s, 'POST', '/api/%s/batch' % op, body, FRAME_REQUEST_HEADERS % len(body))

    def frame_results(self, s, op, count, answer, offset, total):
        """The result texts of a frame's answer (status, body), in order, or the SQL error it stands for."""
        status, raw = answer
        path = '/api/%s/batch' % op
        self.check_status(s, op, path, status, raw)
        try:
            return self.read_results(s, op, raw, count, offset, total)
        except (struct.error, ValueError, IndexError):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s with a body that is not a result frame for %d items' % (s.url, path, count),
                      hint=ENGINE_CHECK_HINT)

    def post_json(self, s, op, path, payload):
        """POST a JSON body (the calls without a frame form, such as equality terms); the answer object."""
        body = json.dumps(payload, ensure_ascii=False).encode('utf-8')
        status, raw = self.exchange(s, 'POST', path, body, 'Content-Type: application/json\r\nContent-Length: %d\r\n' % len(body))
        self.check_status(s, op, path, status, raw)
        answer = self.parse(raw)
        if not isinstance(answer, dict):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s with a body that is not JSON' % (s.url, path), hint=ENGINE_CHECK_HINT)
        return answer

    def check_status(self, s, op, path, status, raw):
        """Anything but 200 as the SQL error it stands for."""
        if status == 200:
            return
        answer = self.parse(raw)
        message = answer.get('error') if isinstance(answer, dict) else None
        # {"success": false, ...} bodies and 413 are the engine refusing the data; anything else is the engine's state.
        if 400 <= status < 500 and (isinstance(answer, dict) and 'success' in answer or status == 413):
            self.fail(ITEM_FAILED, 'svc_%s: %s' % (op, message or 'HTTP %d' % status))
        self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d to POST %s%s' % (s.url, status, path, ': ' + message if message else ''),
                  hint=ENGINE_CHECK_HINT)

    def read_results(self, s, op, raw, count, offset, total):
        magic, version, operation, _, n, _, _, _ = RESULT_HEADER.unpack_from(raw, 0)
        if magic != MAGIC or version != FRAME_VERSION or operation != FRAME_OPS[op] | 0x80 or n != count:
            raise ValueError('not the expected result frame')
        out = []
        append = out.append
        item = RESULT_ITEM.unpack_from
        length = U32.unpack_from
        size = len(raw)
        o = RESULT_HEADER.size
        for index in range(count):
            code, _, p = item(raw, o)
            o += 6 + p
            d, = length(raw, o)
            o += 4
            if o + d > size:
                raise ValueError('item runs past the end')
            if code == ITEM_SUCCESS:
                try:
                    append(raw[o:o + d].decode('utf-8'))
                    o += d
                    continue
                except UnicodeDecodeError:
                    # Plaintext another client encrypted as raw bytes: a text result cannot carry it.
                    message = 'decrypted data is not valid UTF-8'
            else:
                message = raw[o:o + d].decode('utf-8', 'replace') or 'item failed'
            detail = 'item %d of %d' % (offset + index + 1, total) if total > 1 else None
            self.fail(ITEM_FAILED, 'svc_%s: %s' % (op, message), detail=detail)
        if o != size:
            raise ValueError('trailing bytes')
        return out

    def parse(self, raw):
        try:
            return json.loads(raw)
        except ValueError:
            return None

    # ---- HTTP ---------------------------------------------------------------------------------------
    # A minimal HTTP/1.1 client on the backend's socket: one request written at once, the status line
    # and headers read up to MAX_HEADER_BYTES, then exactly Content-Length body bytes. Only Content-Length,
    # Connection and Transfer-Encoding are looked at; the engine always answers with a length, so a chunked
    # or length-less answer is refused rather than read. https:// wraps the same socket in ssl (the default
    # context: certificate and host name verified).

    def exchange(self, s, method, path, body, headers):
        """One request on the backend's keep-alive connection (lane 0): (status, body)."""
        return self.http_finish(s, 0, self.http_send(s, 0, self.request(s, method, path, body, headers)))

    def request(self, s, method, path, body, headers):
        host = '[%s]' % s.host if ':' in s.host else s.host
        if s.port != (443 if s.scheme == 'https' else 80):
            host += ':%d' % s.port
        request = ('%s %s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n' % (method, s.base_path, path, host, headers)).encode('latin-1')
        return request + body if body is not None else request

    def http_send(self, s, lane, request):
        """Writes `request` on the lane's connection (opened if needed); the pending exchange for http_finish:
        [request, deadline, whether the connection was reused, or None when it is still to be sent]."""
        deadline = time.monotonic() + s.timeout_s
        key = (s.scheme, s.host, s.port)
        reused = self.socks[lane] is not None and self.sock_keys[lane] == key
        try:
            self.send_all(self.connection(s, lane, key, deadline), request, deadline)
            return [request, deadline, reused]
        except Unavailable:
            self.close()
            self.timed_out(s)
        except OSError as e:
            if reused and not is_timeout(e):
                # A reused connection that broke while idle: http_finish sends again on a new one.
                self.close(lane)
                return [request, deadline, None]
            if lane > 0 and self.socks[lane] is None:
                raise LaneRefused()
            self.http_failed(s, e)
        except BaseException:
            self.close()
            raise

    def http_finish(self, s, lane, pending):
        """The answer (status, body) to a request http_send wrote; a broken reused connection is reopened and
        the request sent again, once."""
        request, deadline, reused = pending
        for attempt in (0, 1):
            try:
                if reused is None:
                    reused = False
                    self.send_all(self.connection(s, lane, (s.scheme, s.host, s.port), deadline), request, deadline)
                return self.read_response(s, lane, deadline)
            except Unavailable:
                self.close()
                self.timed_out(s)
            except OSError as e:
                if reused and attempt == 0 and not is_timeout(e) and time.monotonic() < deadline:
                    self.close(lane)
                    reused = None
                    continue
                self.http_failed(s, e)
            except BaseException:
                # A cancel or statement_timeout (raised by the interrupt check), or an answer refused below,
                # leaves the connections in an unknown state.
                self.close()
                raise
        raise AssertionError('unreachable')

    def http_failed(self, s, error):
        self.close()
        if is_timeout(error):
            self.timed_out(s)
        self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.url, describe(error)), hint=ENGINE_CHECK_HINT)

    def read_response(self, s, lane, deadline):
        sock = self.socks[lane]
        buf = b''
        while True:
            end = buf.find(b'\r\n\r\n')
            if end >= 0:
                break
            if len(buf) > MAX_HEADER_BYTES:
                self.fail(UNAVAILABLE, 'engine at %s answered with more than %d bytes of HTTP headers' % (s.url, MAX_HEADER_BYTES), hint=ENGINE_CHECK_HINT)
            buf += self.receive(sock, deadline, 65536)
        # Header names are case-insensitive: the block is lower-cased once and searched for the three that matter.
        head = buf[:end].lower() + b'\r\n'
        first = head.find(b'\r\n')
        version, _, rest = head[:first].partition(b' ')
        code = rest[:3]
        if not version.startswith(b'http/1.') or not code.isdigit():
            self.fail(UNAVAILABLE, 'engine at %s answered something that is not HTTP/1.1' % s.url, hint=ENGINE_CHECK_HINT)
        status = int(code)
        value = header(head, b'transfer-encoding')
        if value is not None and value != b'identity':
            self.fail(UNAVAILABLE, 'engine at %s answered with Transfer-Encoding: %s; the bridge reads only answers with a Content-Length'
                      % (s.url, value.decode('latin-1')), hint=ENGINE_CHECK_HINT)
        value = header(head, b'content-length')
        length = None
        if value is not None:
            if not value.isdigit() or head.count(b'\r\ncontent-length:') > 1:
                self.fail(UNAVAILABLE, 'engine at %s answered an invalid Content-Length' % s.url, hint=ENGINE_CHECK_HINT)
            length = int(value)
        value = header(head, b'connection')
        tokens = [t.strip() for t in value.split(b',')] if value is not None else []
        close = b'close' in tokens or version == b'http/1.0' and b'keep-alive' not in tokens
        if length is None:
            if status in (204, 304) or 100 <= status < 200:
                length = 0
            else:
                self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d without a Content-Length' % (s.url, status), hint=ENGINE_CHECK_HINT)
        if length > MAX_RESPONSE_BYTES:
            self.fail(UNAVAILABLE, 'engine at %s answered %d bytes, more than the %d the bridge accepts' % (s.url, length, MAX_RESPONSE_BYTES),
                      hint=ENGINE_CHECK_HINT)
        body = buf[end + 4:]
        if len(body) < length:
            # The rest of a large body goes straight into its final buffer.
            whole = bytearray(length)
            whole[:len(body)] = body
            view = memoryview(whole)
            got = len(body)
            while got < length:
                n = self.receive_into(sock, deadline, view[got:])
                got += n
            body = bytes(whole)
        elif len(body) > length:
            # Nothing is pipelined, so bytes after the answer mean the connection cannot be trusted.
            close = True
            body = body[:length]
        if close:
            self.close(lane)
        return status, body

    def timed_out(self, s):
        self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.url, s.timeout_ms), hint=ENGINE_CHECK_HINT)

    # The socket is non-blocking once open: a call is one send, one wait and one receive, where a socket with a
    # timeout would add a poll before each and a change of timeout per call.

    def send_all(self, sock, data, deadline):
        view = memoryview(data)
        while view:
            try:
                view = view[sock.send(view):]
            except (BlockingIOError, ssl.SSLWantWriteError):
                self.wait_for(sock, deadline, True)
            except ssl.SSLWantReadError:
                self.wait_for(sock, deadline, False)

    def receive(self, sock, deadline, size):
        return self.read(sock, deadline, sock.recv, size)

    def receive_into(self, sock, deadline, view):
        return self.read(sock, deadline, sock.recv_into, view)

    def read(self, sock, deadline, call, arg):
        """call(arg) once the socket has something to read: the bytes (or their count) it read."""
        self.wait_readable(sock, deadline)
        while True:
            try:
                got = call(arg)
            except (BlockingIOError, ssl.SSLWantReadError):
                self.wait_for(sock, deadline, False)
                continue
            except ssl.SSLWantWriteError:
                self.wait_for(sock, deadline, True)
                continue
            if not got:
                raise ConnectionResetError('the engine closed the connection')
            return got

    def connection(self, s, lane, key, deadline):
        if self.socks[lane] is not None and self.sock_keys[lane] == key:
            return self.socks[lane]
        self.close(lane)
        timeout = max(deadline - time.monotonic(), 0.001)
        sock = socket.create_connection((s.host, s.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if s.scheme == 'https':
                if self.tls is None:
                    self.tls = ssl.create_default_context()
                sock = self.tls.wrap_socket(sock, server_hostname=s.host)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.socks[lane] = sock
        self.sock_keys[lane] = key
        return sock

    def wait_readable(self, sock, deadline):
        # Bytes ssl has already decrypted are invisible to select.
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return
        self.wait_for(sock, deadline, False)

    def wait_for(self, fd, deadline, write):
        """Until `fd` is readable (writable), polling for interrupts; Unavailable once the deadline passed."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Unavailable()
            readable, writable, _ = select.select([] if write else [fd], [fd] if write else [], [], min(remaining, INTERRUPT_SLICE_S))
            if readable or writable:
                return
            if not self.parallel_worker:
                if self.tick_plan is None:
                    self.tick_plan = self.plpy.prepare('SELECT 1')
                self.plpy.execute(self.tick_plan)

    def close(self, lane=None):
        """Closes the HTTP connection of `lane`, or of every lane."""
        drop(self.socks, self.sock_keys, lane)

    # ---- the wire endpoint ------------------------------------------------------------------------------
    # With option wire_url, the calls go to the engine's PostgreSQL wire endpoint (docs/pgwire.md) through
    # psycopg2, that is libpq with its SCRAM, TLS and protocol code: an engine command costs the engine about
    # half the CPU of an HTTP request. One connection per backend, in asynchronous mode, so the wait keeps
    # svc.timeout_ms and PostgreSQL's interrupt checks; the user and password come from the owner's user
    # mapping when it opens and are not kept.

    def wire_batch(self, s, op, policy, data, offset, total, many):
        """One command for `data` (UTF-8 values): svc_<op>[_many][_by_name]; the result texts in order."""
        rows = self.wire_query(s, 'svc_' + op, self.wire_command(op, policy, data, many), offset, total)
        return self.wire_results(s, op, data, rows, many)

    def wire_command(self, op, policy, data, many):
        command = 'svc_%s%s' % (op, '_many' if many else '')
        if policy is not None:
            kind, reference, version = policy
            ref = b64(reference.encode('utf-8'))
            command = '%s_by_name %s %s' % (command, ref, version or '-') if kind == POLICY_NAME else '%s %s' % (command, ref)
        return ' '.join([command] + [b64(d) for d in data])

    def wire_results(self, s, op, data, rows, many):
        name = 'svc_%s%s' % (op, '_many' if many else '')
        if many:
            if len(rows) != len(data) or any(row[0] != k + 1 for k, row in enumerate(rows)):
                self.fail(UNAVAILABLE, 'engine at %s answered %d rows to %s of %d values' % (s.wire, len(rows), name, len(data)), hint=WIRE_CHECK_HINT)
            return [row[1] for row in rows]
        if len(rows) != 1 or len(rows[0]) != 1:
            self.fail(UNAVAILABLE, 'engine at %s answered %d rows to %s' % (s.wire, len(rows), name), hint=WIRE_CHECK_HINT)
        return [rows[0][0]]

    def wire_query(self, s, op, command, offset=0, total=1):
        """The rows answering one command on lane 0."""
        return self.wire_finish(s, 0, op, self.wire_send(s, 0, command), offset, total)

    def wire_send(self, s, lane, command):
        """Sends `command` on the lane's connection (opened if needed); the pending command for wire_finish:
        [command, deadline, cursor or None when it is still to be sent, whether the connection was reused]."""
        pg = self.psycopg2()
        deadline = time.monotonic() + s.timeout_s
        reused = self.wire_conns[lane] is not None and self.wire_keys[lane] == s.wire
        try:
            cursor = self.wire_connection(s, lane, deadline).cursor()
            cursor.execute(command)
            return [command, deadline, cursor, reused]
        except pg.Error as e:
            if reused and wire_broken(e):
                # A reused connection that broke while idle: wire_finish sends again on a new one.
                self.wire_close(lane)
                return [command, deadline, None, False]
            if lane > 0 and self.wire_conns[lane] is None:
                raise LaneRefused()
            self.wire_close()
            self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.wire, first_line(e)), hint=WIRE_CHECK_HINT)
        except Unavailable:
            self.wire_close()
            self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.wire, s.timeout_ms), hint=WIRE_CHECK_HINT)
        except BaseException:
            self.wire_close()
            raise

    def wire_finish(self, s, lane, op, pending, offset, total):
        """The rows answering a command wire_send sent; a broken reused connection is reopened and the command
        sent again, once."""
        pg = self.psycopg2()
        command, deadline, cursor, reused = pending
        for attempt in (0, 1):
            try:
                if cursor is None:
                    cursor = self.wire_connection(s, lane, deadline).cursor()
                    cursor.execute(command)
                self.wire_wait(self.wire_conns[lane], deadline)
                return cursor.fetchall()
            except Unavailable:
                self.wire_close()
                self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.wire, s.timeout_ms), hint=WIRE_CHECK_HINT)
            except pg.Error as e:
                if wire_broken(e):
                    self.wire_close(lane)
                    if reused and attempt == 0 and time.monotonic() < deadline:
                        cursor, reused = None, False
                        continue
                    self.wire_close()
                    self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.wire, first_line(e)), hint=WIRE_CHECK_HINT)
                self.wire_failed(s, op, e, offset, total)
            except BaseException:
                # A cancel or statement_timeout (raised by the interrupt check) leaves the command unanswered.
                self.wire_close()
                raise
        raise AssertionError('unreachable')

    def wire_failed(self, s, op, error, offset, total):
        """An engine error as the SQL error it stands for; "item i of n" counted over the whole array."""
        message = error.diag.message_primary or first_line(error)
        detail = error.diag.message_detail
        if error.pgcode == ITEM_FAILED:
            item = ITEM_DETAIL.match(detail or '')
            if item:
                detail = 'item %d of %d' % (offset + int(item.group(1)), total)
            elif total > 1:
                detail = 'item %d of %d' % (offset + 1, total)
            self.fail(ITEM_FAILED, message, detail=detail)
        if error.pgcode == UNAVAILABLE:
            self.fail(UNAVAILABLE, message, detail=detail, hint=ENGINE_CHECK_HINT)
        self.fail(UNAVAILABLE, 'engine at %s answered %s to %s: %s' % (s.wire, error.pgcode, op, message), hint=WIRE_CHECK_HINT)

    def wire_connection(self, s, lane, deadline):
        if self.wire_conns[lane] is not None and self.wire_keys[lane] == s.wire:
            return self.wire_conns[lane]
        self.wire_close(lane)
        pg = self.psycopg2()
        mapping = self.mapping()
        if not mapping.get('user') or not mapping.get('password'):
            self.fail(CONFIG, 'option wire_url of the foreign server %s needs a user and password in the user mapping of the owner of the svc functions'
                      % SERVER, hint=WIRE_MAPPING_HINT)
        try:
            conn = self.wire_conns[lane] = pg.connect(s.wire, user=mapping['user'], password=mapping['password'],
                                                      application_name='svc_bridge', async_=True)
            self.wire_keys[lane] = s.wire
            self.wire_wait(conn, deadline)
        except pg.OperationalError as e:
            self.wire_close(lane)
            text = str(e)
            if 'password authentication failed' in text or 'no password supplied' in text:
                self.fail(CONFIG, 'the engine refused the credentials of the user mapping for server %s' % SERVER,
                          detail=text[text.find('password authentication failed'):].split('\n', 1)[0].strip() or None, hint=WIRE_MAPPING_HINT)
            raise
        return self.wire_conns[lane]

    def wire_wait(self, conn, deadline):
        """Until psycopg2 has finished the connection's current step (POLL_OK is 0, POLL_WRITE 2)."""
        while True:
            state = conn.poll()
            if state == 0:
                return
            self.wait_for(conn.fileno(), deadline, state == 2)

    def wire_close(self, lane=None):
        """Closes the wire connection of `lane`, or of every lane."""
        drop(self.wire_conns, self.wire_keys, lane)

    def fail(self, sqlstate, message, detail=None, hint=None):
        kwargs = {'sqlstate': sqlstate}
        if detail:
            kwargs['detail'] = detail
        if hint:
            kwargs['hint'] = hint
        self.plpy.error(message, **kwargs)


def in_parallel_worker():
    # PostgreSQL names its parallel workers in the process title ("postgres: parallel worker for PID n").
    try:
        with open('/proc/self/cmdline', 'rb') as f:
            return b'parallel worker for PID' in f.read()
    except OSError:
        return False


def header(head, name):
    """The stripped value of header `name` in a lower-cased header block ending in CRLF, or None."""
    start = head.find(b'\r\n' + name + b':')
    if start < 0:
        return None
    start += len(name) + 3
    return head[start:head.find(b'\r\n', start)].strip()


def name_values(options):
    """A server's or user mapping's options (name=value strings, split as pg_options_to_table splits them)."""
    return dict(o.split('=', 1) for o in options or [] if '=' in o)


def b64(data):
    """A text argument of a wire command: standard base64 of the UTF-8 bytes, "-" for the empty string."""
    return base64.b64encode(data).decode('ascii') if data else '-'


def drop(conns, keys, lane):
    """Closes the connection of `lane` in `conns` (sockets or psycopg2 connections), or every one."""
    for k in range(len(conns)) if lane is None else (lane,):
        if conns[k] is not None:
            try:
                conns[k].close()
            except Exception:
                pass
        conns[k] = None
        keys[k] = None


def is_timeout(error):
    return isinstance(error, TimeoutError) or 'timed out' in str(error)


def wire_broken(error):
    """A psycopg2 error that leaves the connection unusable (no SQLSTATE, class 08, or the engine going away)."""
    code = error.pgcode
    return code is None or code.startswith('08') or code in WIRE_BROKEN


def first_line(error):
    text = str(error).strip()
    return text.split('\n', 1)[0].strip() or error.__class__.__name__


def describe(error):
    text = str(error) or error.__class__.__name__
    return text.split('] ', 1)[-1] if text.startswith('[Errno') else text
$svc_python_module$, 'UTF8'), 'base64'), E'\n', ''));
  js_prelude := replace(replace($js$var b = globalThis['svc_bridge:6a5db8d59365'];
if (!b) b = globalThis['svc_bridge:6a5db8d59365'] = ((function () {
var exports = {};
"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.STATEMENTS = exports.SQLSTATES = void 0;
exports.createBridge = createBridge;
exports.SQLSTATES = { itemFailed: 'SV001', unavailable: 'SV002', config: 'SV003' };
const DEFAULT_TIMEOUT_MS = 5000;
const MAX_TIMEOUT_MS = 3600000;
const DEFAULT_BATCH_SIZE = 1000;
const MAX_BATCH_SIZE = 10000;
const MAX_REQUEST_DATA_CHARS = 2 * 1024 * 1024;
const QUERY_CANCELED = '57014';
const SERVER = 'svc_engine';
const BRIDGE_FDW = 'svc_bridge_fdw';
const SERVER_HINT = "CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url 'http://127.0.0.1:8080') as a superuser or the owner of the svc functions; see docs/sql.md.";
const ENGINE_CHECK_HINT = 'Check the engine directly (GET <url of server svc_engine>/api/health and one POST /api/encrypt); if it works there, the problem is between PostgreSQL and the engine.';
exports.STATEMENTS = {
    prepare: "SELECT @HTTP@.http_set_curlopt('CURLOPT_TIMEOUT_MS', $1) AS timeout, pg_catalog.set_config('http.keepalive', 'on', true) AS keepalive",
    request: 'SELECT status, content FROM @HTTP@.http(ROW($1, $2, ' +
        'ARRAY(SELECT @HTTP@.http_header(h->>0, h->>1) FROM pg_catalog.jsonb_array_elements($3::jsonb) AS h), $4, $5)::@HTTP@.http_request)',
    raise: 'SELECT @SCHEMA@.svc__raise($1, $2, $3, $4)',
    server: 'SELECT w.fdwname::text AS wrapper, s.srvoptions AS options FROM pg_catalog.pg_foreign_server s ' +
        'JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw WHERE s.srvname = $1',
    tenant: 'SELECT t.option_value AS tenant_id FROM pg_catalog.pg_user_mappings m, pg_catalog.pg_options_to_table(m.umoptions) AS t ' +
        "WHERE m.srvname = $1 AND m.usename = CURRENT_USER AND t.option_name = 'tenant_id'",
};
function createBridge(plv8, schema, httpSchema) {
    const sql = (text) => text.replace(/@SCHEMA@/g, schema).replace(/@HTTP@/g, httpSchema);
    const statements = {
        prepare: sql(exports.STATEMENTS.prepare),
        request: sql(exports.STATEMENTS.request),
        raise: sql(exports.STATEMENTS.raise),
        server: exports.STATEMENTS.server,
        tenant: exports.STATEMENTS.tenant,
    };
    let cached;
    const ahead = [];
    function fail(sqlstate, message, detail, hint) {
        plv8.execute(statements.raise, [sqlstate, message, detail !== null && detail !== void 0 ? detail : null, hint !== null && hint !== void 0 ? hint : null]);
        throw new Error(message);
    }
    function integer(raw, name, fallback, max) {
        if (raw === null || raw === undefined || String(raw).trim() === '')
            return fallback;
        const text = String(raw).trim();
        const value = /^[0-9]+$/.test(text) ? Number(text) : 0;
        if (value < 1 || value > max)
            fail(exports.SQLSTATES.config, `${name} must be an integer from 1 to ${max}, got "${raw}"`);
        return value;
    }
    function address(raw, option) {
        const text = typeof raw === 'string' ? raw.trim() : '';
        if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/.test(text)) {
            fail(exports.SQLSTATES.config, `option ${option} of the foreign server ${SERVER} must be an http:// or https:// URL without query, got "${raw}"`);
        }
        return text.replace(/\/+$/, '');
    }
    function settings(cfg) {
        const key = JSON.stringify(cfg !== null && cfg !== void 0 ? cfg : null);
        if ((cached === null || cached === void 0 ? void 0 : cached.key) !== key)
            cached = { key, settings: lookUp(cfg) };
        return cached.settings;
    }
    function lookUp(cfg) {
        var _a;
        const [, timeoutMs, batchSize] = cfg !== null && cfg !== void 0 ? cfg : [];
        const row = plv8.execute(statements.server, [SERVER])[0];
        if (row === undefined) {
            fail(exports.SQLSTATES.config, `the foreign server ${SERVER} that holds the engine address does not exist`, undefined, SERVER_HINT);
        }
        const wrapper = row.wrapper;
        if (wrapper !== BRIDGE_FDW) {
            fail(exports.SQLSTATES.config, `the foreign server ${SERVER} is on the foreign-data wrapper ${String(wrapper)}, not ${BRIDGE_FDW}`, undefined, `Drop it and ${SERVER_HINT}`);
        }
        const options = new Map();
        for (const option of (_a = row.options) !== null && _a !== void 0 ? _a : []) {
            const at = option.indexOf('=');
            if (at > 0)
                options.set(option.slice(0, at), option.slice(at + 1));
        }
        const url = options.get('url');
        const opsUrl = options.get('ops_url');
        if (url === undefined || url.trim() === '') {
            fail(exports.SQLSTATES.config, `the foreign server ${SERVER} has no option url`, undefined, "ALTER SERVER svc_engine OPTIONS (ADD url 'http://127.0.0.1:8080'); see docs/sql.md.");
        }
        const base = address(url, 'url');
        return {
            url: base,
            opsUrl: opsUrl !== undefined && opsUrl.trim() !== '' ? address(opsUrl, 'ops_url') : base,
            timeoutMs: integer(timeoutMs, 'svc.timeout_ms', DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS),
            batchSize: integer(batchSize, 'svc.batch_size', DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE),
        };
    }
    function tenantId() {
        var _a;
        const value = (_a = plv8.execute(statements.tenant, [SERVER])[0]) === null || _a === void 0 ? void 0 : _a.tenant_id;
        return typeof value === 'string' && value !== '' ? value : null;
    }
    function exchange(s, method, path, body, headers, base = s.url) {
        var _a, _b;
        plv8.execute(statements.prepare, [String(s.timeoutMs)]);
        try {
            const row = plv8.execute(statements.request, [
                method,
                base + path,
                JSON.stringify(headers),
                body === null ? null : 'application/json',
                body,
            ])[0];
            return { status: Number(row === null || row === void 0 ? void 0 : row.status), content: String((_a = row === null || row === void 0 ? void 0 : row.content) !== null && _a !== void 0 ? _a : '') };
        }
        catch (error) {
            const e = error;
            if (e.sqlerrcode === QUERY_CANCELED)
                throw error;
            const text = String((_b = e.message) !== null && _b !== void 0 ? _b : error);
            if (/timed? ?out/i.test(text)) {
                fail(exports.SQLSTATES.unavailable, `engine at ${base} did not answer within svc.timeout_ms (${s.timeoutMs} ms)`, undefined, ENGINE_CHECK_HINT);
            }
            return fail(exports.SQLSTATES.unavailable, `engine at ${base} is unreachable: ${text}`, undefined, ENGINE_CHECK_HINT);
        }
    }
    function parse(s, path, status, content) {
        try {
            return JSON.parse(content);
        }
        catch {
            if (status === 200) {
                fail(exports.SQLSTATES.unavailable, `engine at ${s.url} answered POST ${path} with a body that is not JSON`, undefined, ENGINE_CHECK_HINT);
            }
            return null;
        }
    }
    function postJson(s, op, path, payload) {
        const { status, content } = exchange(s, 'POST', path, JSON.stringify(payload), [
            ['Content-Type', 'application/json'],
        ]);
        const answer = parse(s, path, status, content);
        if (status !== 200) {
            const message = answer && typeof answer.error === 'string' ? answer.error : undefined;
            if (status >= 400 && status < 500 && ((answer !== null && 'success' in answer) || status === 413)) {
                fail(exports.SQLSTATES.itemFailed, `svc_${op}: ${message !== null && message !== void 0 ? message : `HTTP ${status}`}`);
            }
            fail(exports.SQLSTATES.unavailable, `engine at ${s.url} answered HTTP ${status} to POST ${path}${message ? `: ${message}` : ''}`, undefined, ENGINE_CHECK_HINT);
        }
        return answer !== null && typeof answer === 'object' ? answer : {};
    }
    function postBatch(s, op, items, offset, total) {
        const path = `/api/${op}/batch`;
        const answer = postJson(s, op, path, { items });
        const results = answer.results;
        if (!Array.isArray(results) || results.length !== items.length) {
            fail(exports.SQLSTATES.unavailable, `engine at ${s.url} answered POST ${path} without one result per item`, undefined, ENGINE_CHECK_HINT);
        }
        return results.map((result, index) => {
            if (!result.success) {
                const detail = total > 1 ? `item ${offset + index + 1} of ${total}` : undefined;
                fail(exports.SQLSTATES.itemFailed, `svc_${op}: ${result.message || 'item failed'}`, detail);
            }
            return String(op === 'decrypt' ? result.decryptedData : result.encryptedData);
        });
    }
    function runOne(cfg, op, item) {
        const results = postBatch(settings(cfg), op, [item], 0, 1);
        return results[0];
    }
    function runArray(cfg, op, values, makeItem) {
        if (values === null)
            return null;
        const out = values.slice();
        const positions = [];
        out.forEach((v, i) => {
            if (v !== null && v !== undefined)
                positions.push(i);
        });
        if (positions.some((i) => Array.isArray(out[i])))
            fail('2202E', `svc_${op}: only one-dimensional arrays are supported`);
        if (positions.length === 0)
            return out;
        const s = settings(cfg);
        const total = positions.length;
        let start = 0;
        while (start < total) {
            let end = start;
            let size = 0;
            while (end < total && end - start < s.batchSize) {
                const n = out[positions[end]].length;
                if (end > start && size + n > MAX_REQUEST_DATA_CHARS)
                    break;
                size += n;
                end += 1;
            }
            const chunk = positions.slice(start, end);
            const results = postBatch(s, op, chunk.map((i) => makeItem(out[i])), start, total);
            chunk.forEach((i, k) => {
                out[i] = results[k];
            });
            start = end;
        }
        return out;
    }
    function aheadItems(name, op, policyCode) {
        if (op !== 'encrypt' && op !== 'decrypt' && op !== 'rewrap')
            fail('22023', `${name}: op must be 'encrypt', 'decrypt' or 'rewrap'`);
        if (op === 'encrypt') {
            if (policyCode === null)
                fail('22023', `${name}: encrypt needs a policy code`);
            return [op, (data) => ({ data, policyCode })];
        }
        if (policyCode !== null)
            fail('22023', `${name}: ${op} takes no policy code`);
        return [op, (data) => ({ data })];
    }
    function arraySend(op, values, policyCode) {
        aheadItems('svc_array_send', op, policyCode);
        const sent = values === null ? [] : values.filter((v) => v !== null && v !== undefined);
        if (sent.some((v) => Array.isArray(v)))
            fail('2202E', 'svc_array_send: only one-dimensional arrays are supported');
        if (ahead.length === 2)
            ahead.shift();
        ahead.push({ op, policyCode, values: values === null ? null : values.slice() });
        return sent.length;
    }
    function arrayCollect(cfg, op, values, policyCode) {
        const [checkedOp, makeItem] = aheadItems('svc_array_collect', op, policyCode);
        const same = (a, b) => a === null || b === null ? a === b : a.length === b.length && a.every((v, i) => v === b[i]);
        const index = ahead.findIndex((a) => a.op === op && a.policyCode === policyCode && same(a.values, values));
        if (index < 0) {
            fail('55000', 'svc_array_collect: this session has no array sent ahead with these arguments', undefined, 'Call svc_array_send with the same arguments first.');
        }
        ahead.splice(index, 1);
        return runArray(cfg, checkedOp, values, makeItem);
    }
    function health(cfg) {
        const s = settings(cfg);
        const { status, content } = exchange(s, 'GET', '/api/health', null, []);
        if (status !== 200) {
            fail(exports.SQLSTATES.unavailable, `engine at ${s.url} answered HTTP ${status} to GET /api/health`, undefined, ENGINE_CHECK_HINT);
        }
        return content;
    }
    return {
        encrypt: (cfg, data, policyCode) => runOne(cfg, 'encrypt', { data, policyCode }),
        encryptByName: (cfg, data, policyName, policyVersion) => runOne(cfg, 'encrypt', policyVersion === null ? { data, policyName } : { data, policyName, policyVersion }),
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
                fail(exports.SQLSTATES.unavailable, `engine at ${s.url} answered POST ${path} without terms`, undefined, ENGINE_CHECK_HINT);
            }
            return terms;
        },
        health,
        engineInfo: (cfg) => {
            const s = settings(cfg);
            const info = {
                engineServer: SERVER,
                engineUrl: s.url,
                opsUrl: s.opsUrl,
                bridge: 'plv8',
                timeoutMs: s.timeoutMs,
                batchSize: s.batchSize,
                health: JSON.parse(health(cfg)),
            };
            const tenant = tenantId();
            const headers = tenant ? [['X-SVC-Tenant-Id', tenant]] : [];
            const { status, content } = exchange(s, 'GET', '/engine/api/v1/runtime/info', null, headers, s.opsUrl);
            if (status === 200) {
                info.runtime = JSON.parse(content);
            }
            else {
                info.runtime = null;
                info.runtimeStatus = status;
            }
            return JSON.stringify(info);
        },
    };
}
return exports;
})()).createBridge(plv8, @SCHEMA_JSON@, @HTTP_JSON@);
$js$,
    '@SCHEMA_JSON@', to_json(quote_ident(target_schema))::text),
    '@HTTP_JSON@', coalesce(to_json(http_schema)::text, 'null'));
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_data_wrapper WHERE fdwname = 'svc_bridge_fdw') THEN
    CREATE FOREIGN DATA WRAPPER svc_bridge_fdw;
    COMMENT ON FOREIGN DATA WRAPPER svc_bridge_fdw IS 'holds the engine address of the svc bridge: CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url ...); see docs/sql.md';
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_db_role_setting d, pg_catalog.unnest(d.setconfig) AS c(setting)
              WHERE d.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()))
                AND c.setting LIKE 'svc.engine\_url=%') THEN
    RAISE NOTICE 'svc bridge: svc.engine_url is no longer read; the engine address is the option url of the foreign server svc_engine'
      USING HINT = 'CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url ''http://...''), then ALTER DATABASE ... RESET svc.engine_url; see docs/sql.md.';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server WHERE srvname = 'svc_engine') THEN
    RAISE NOTICE 'svc bridge: create the foreign server svc_engine that holds the engine address'
      USING HINT = 'CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url ''http://127.0.0.1:8080''); see docs/sql.md.';
  END IF;
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__encrypt(data text, policy_code text, cfg text[]) RETURNS text LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.encrypt(cfg, data, policy_code)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.encrypt(cfg, data, policy_code);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__encrypt(text, text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__encrypt_by_name(data text, policy_name text, policy_version integer, cfg text[]) RETURNS text LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    if data is None or policy_name is None:
        return None
    return b.encrypt_by_name(cfg, data, policy_name, policy_version)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$if (data === null || policy_name === null) return null;
return b.encryptByName(cfg, data, policy_name, policy_version);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__encrypt_by_name(text, text, integer, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__decrypt(data text, cfg text[]) RETURNS text LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.decrypt(cfg, data)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.decrypt(cfg, data);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__decrypt(text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__encrypt_array(data text[], policy_code text, cfg text[]) RETURNS text[] LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.encrypt_array(cfg, data, policy_code)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.encryptArray(cfg, data, policy_code);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__encrypt_array(text[], text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__decrypt_array(data text[], cfg text[]) RETURNS text[] LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.decrypt_array(cfg, data)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.decryptArray(cfg, data);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__decrypt_array(text[], text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__rewrap(data text, cfg text[]) RETURNS text LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.rewrap(cfg, data)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.rewrap(cfg, data);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__rewrap(text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__rewrap_array(data text[], cfg text[]) RETURNS text[] LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.rewrap_array(cfg, data)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.rewrapArray(cfg, data);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__rewrap_array(text[], text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__array_send(op text, data text[], policy_code text, cfg text[]) RETURNS integer LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.array_send(cfg, op, data, policy_code)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.arraySend(cfg, op, data, policy_code);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__array_send(text, text[], text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__array_collect(op text, data text[], policy_code text, cfg text[]) RETURNS text[] LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.array_collect(cfg, op, data, policy_code)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.arrayCollect(cfg, op, data, policy_code);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__array_collect(text, text[], text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__equality_terms(data text, policy_code text, cfg text[]) RETURNS text[] LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.equality_terms(cfg, data, policy_code)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return b.equalityTerms(cfg, data, policy_code);$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__equality_terms(text, text, text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__health(cfg text[]) RETURNS jsonb LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.health(cfg)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return JSON.parse(b.health(cfg));$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__health(text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc__engine_info(cfg text[]) RETURNS jsonb LANGUAGE %s VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, bridge, CASE bridge WHEN 'plpython3u' THEN py_prelude || $py$try:
    return b.engine_info(cfg)
except plpy.Error as e:
    raise e.with_traceback(None)$py$
                                       ELSE js_prelude || $js$return JSON.parse(b.engineInfo(cfg));$js$ END);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc__engine_info(text[]) FROM PUBLIC, svc_user', target_schema);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_encrypt(data text, policy_code text) RETURNS text LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__encrypt(data, policy_code, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt(text, text) IS %L', target_schema, $c$Encrypts a value under a policy code through the engine; NULL in, NULL out.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_encrypt_by_name(data text, policy_name text, policy_version integer DEFAULT NULL) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__encrypt_by_name(data, policy_name, policy_version, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt_by_name(text, text, integer) IS %L', target_schema, $c$Encrypts a value under a policy name, at policy_version or the latest version when NULL.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_encrypt(data text, policy_name text, policy_version integer) RETURNS text LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__encrypt_by_name(data, policy_name, policy_version, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt(text, text, integer) IS %L', target_schema, $c$Same as svc_encrypt_by_name: encrypts under a policy name, at policy_version or the latest when NULL.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_decrypt(data text) RETURNS text LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__decrypt(data, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_decrypt(text) IS %L', target_schema, $c$Decrypts a ciphertext (hub:<policy>:...) through the engine; NULL in, NULL out.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_encrypt(data text[], policy_code text) RETURNS text[] LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__encrypt_array(data, policy_code, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_encrypt(text[], text) IS %L', target_schema, $c$Encrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_decrypt(data text[]) RETURNS text[] LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__decrypt_array(data, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_decrypt(text[]) IS %L', target_schema, $c$Decrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_rewrap(data text) RETURNS text LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__rewrap(data, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_rewrap(text) IS %L', target_schema, $c$Re-encrypts a ciphertext under the newest active key version of its own policy's key, inside the engine; unchanged when already there. NULL in, NULL out.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_rewrap(data text[]) RETURNS text[] LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__rewrap_array(data, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_rewrap(text[]) IS %L', target_schema, $c$svc_rewrap for a one-dimensional array, in batch requests of svc.batch_size; order and NULL elements kept.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_array_send(op text, data text[], policy_code text DEFAULT NULL) RETURNS integer LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__array_send(op, data, policy_code, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_array_send(text, text[], text) IS %L', target_schema, $c$Sends an array ahead to the engine (op 'encrypt' with a policy code, 'decrypt' or 'rewrap') and returns at once, with the number of values sent; svc_array_collect with the same arguments returns the results. Two arrays pending per session: a third send discards the oldest.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_array_collect(op text, data text[], policy_code text DEFAULT NULL) RETURNS text[] LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__array_collect(op, data, policy_code, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_array_collect(text, text[], text) IS %L', target_schema, $c$The results of the array svc_array_send sent ahead with the same arguments, as the array forms return them (order and NULL elements kept); 55000 when the session sent no such array.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_equality_terms(data text, policy_code text) RETURNS text[] LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__equality_terms(data, policy_code, ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_equality_terms(text, text) IS %L', target_schema, $c$The ciphertexts of a value under every key version of a deterministic policy that can still decrypt, newest first: WHERE col = ANY ((SELECT svc_equality_terms(v, p))::text[]).$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_health() RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__health(ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_health() IS %L', target_schema, $c$The engine's GET /api/health answer; raises SV002 when the engine cannot be reached.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_engine_info() RETURNS jsonb LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
    target_schema, format($b$
DECLARE
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  RETURN %1$I.svc__engine_info(ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]);
EXCEPTION WHEN SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
  e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
  IF e_detail <> '' AND e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
  ELSIF e_detail <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
  ELSIF e_hint <> '' THEN
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
  END IF;
  RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
END$b$, target_schema));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_engine_info() IS %L', target_schema, $c$The engine address and bridge settings in effect, the engine health and, when readable, its runtime info.$c$);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt(text, text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt(text, text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt_by_name(text, text, integer) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt_by_name(text, text, integer) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt(text, text, integer) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt(text, text, integer) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_decrypt(text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_decrypt(text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_encrypt(text[], text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_encrypt(text[], text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_decrypt(text[]) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_decrypt(text[]) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_rewrap(text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_rewrap(text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_rewrap(text[]) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_rewrap(text[]) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_array_send(text, text[], text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_array_send(text, text[], text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_array_collect(text, text[], text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_array_collect(text, text[], text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_equality_terms(text, text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_equality_terms(text, text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_health() FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_health() TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_engine_info() FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_engine_info() TO svc_user', target_schema);
  IF bridge = 'plv8' THEN
    -- Whoever may call the http extension's functions can set curl options (a proxy) in a session that
    -- then calls svc_encrypt, and so choose where the values go; the bridge calls them as the owner.
    FOR ext_function IN
      SELECT p.oid::regprocedure FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
        JOIN pg_catalog.pg_proc p ON p.oid = d.objid
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND e.extname = 'http'
         AND d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
    LOOP
      EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', ext_function);
    END LOOP;
  END IF;
  END IF;
END
$svc_install$;

DO $svc_install$
DECLARE
  target_schema text := current_schema();
BEGIN
  IF to_regprocedure(format('%I.svc_array_send(text, text[], text)', target_schema)) IS NULL THEN
    RAISE EXCEPTION 'svc bridge: install the bridge functions (0001-install-bridge.sql) in schema % first', target_schema
      USING ERRCODE = 'SV003';
  END IF;
  EXECUTE format('CREATE OR REPLACE PROCEDURE %I.svc_encrypt_column(tbl regclass, col name, policy_code text, chunk_rows integer DEFAULT 10000, key_column name DEFAULT NULL) LANGUAGE plpgsql AS %L', target_schema,
    replace($p$
DECLARE
  key_col name := key_column;
  key_type text;
  read_sql text;
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
  seconds float8;
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  IF chunk_rows IS NULL OR chunk_rows < 1 THEN
    RAISE EXCEPTION 'svc_encrypt_column: chunk_rows must be a positive integer' USING ERRCODE = '22023';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped AND t.typcategory = 'S') THEN
    RAISE EXCEPTION 'svc_encrypt_column: % has no text column %', tbl, col USING ERRCODE = '42703';
  END IF;
  IF key_col IS NULL THEN
    SELECT a.attname INTO key_col
      FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE i.indrelid = tbl AND i.indisprimary AND i.indnkeyatts = 1;
    IF key_col IS NULL THEN
      RAISE EXCEPTION 'svc_encrypt_column: % has no single-column primary key', tbl
        USING ERRCODE = '22023', HINT = 'Pass key_column => a unique, not-null column to walk the table by.';
    END IF;
  END IF;
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO key_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = tbl AND a.attname = key_col AND a.attnum > 0 AND NOT a.attisdropped;
  IF key_type IS NULL THEN
    RAISE EXCEPTION 'svc_encrypt_column: % has no column %', tbl, key_col USING ERRCODE = '42703';
  END IF;
  read_sql := format($q$
    SELECT pg_catalog.array_agg(k::text ORDER BY k), pg_catalog.array_agg(v ORDER BY k) FROM (
      SELECT %3$I AS k, %2$I::text AS v FROM %1$s
       WHERE ($1::text IS NULL OR %3$I > $1::%4$s) AND %2$I IS NOT NULL AND NOT (%2$I ~ '^hub:[A-Za-z0-9_.-]+:[A-Za-z0-9_-]+$' AND pg_catalog.length(pg_catalog.split_part(%2$I, ':', 2)) <= 128)
       ORDER BY %3$I LIMIT $2) AS chunk$q$, tbl, col, key_col, key_type);
  write_sql := format($q$
    UPDATE %1$s t SET %2$I = u.new
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS u(k, old, new)
     WHERE t.%3$I = u.k::%4$s AND t.%2$I::text = u.old$q$, tbl, col, key_col, key_type);
  -- The first chunk is small and each next one twice the last, up to chunk_rows, so the procedure does not
  -- sit idle while the engine does a whole first chunk.
  take := least(chunk_rows, 1000);
  BEGIN
    EXECUTE read_sql INTO keys, vals USING NULL::text, take;
    IF keys IS NOT NULL THEN
      PERFORM @SCHEMA@.svc_array_send('encrypt', vals, policy_code);
    END IF;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
    IF e_detail <> '' AND e_hint <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    ELSIF e_detail <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSIF e_hint <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
  END;
  WHILE keys IS NOT NULL LOOP
    BEGIN
      take := least(chunk_rows::bigint, take::bigint * 2);
      EXECUTE read_sql INTO next_keys, next_vals USING keys[pg_catalog.cardinality(keys)], take;
      IF next_keys IS NOT NULL THEN
        PERFORM @SCHEMA@.svc_array_send('encrypt', next_vals, policy_code);
      END IF;
      results := @SCHEMA@.svc_array_collect('encrypt', vals, policy_code);
      EXECUTE write_sql USING keys, vals, results;
      GET DIAGNOSTICS written = ROW_COUNT;
      wanted := pg_catalog.cardinality(keys);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
      e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
      IF e_detail <> '' AND e_hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
      ELSIF e_detail <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
      ELSIF e_hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
      END IF;
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    END;
    COMMIT;
    examined := examined + pg_catalog.cardinality(keys);
    done := done + written;
    skipped := skipped + wanted - written;
    keys := next_keys;
    vals := next_vals;
    seconds := greatest(extract(epoch FROM clock_timestamp() - started)::float8, 0.000001);
    RAISE NOTICE 'svc_encrypt_column: % rows done, % rows/s', done, round(done / seconds);
  END LOOP;
  IF skipped > 0 THEN
    RAISE NOTICE 'svc_encrypt_column: % rows changed by another session while their chunk was at the engine were left as written; call the procedure again to do them', skipped;
  END IF;
  RAISE NOTICE 'svc_encrypt_column: finished, % rows in % s', done, round(extract(epoch FROM clock_timestamp() - started)::numeric, 3);
END
$p$, '@SCHEMA@', quote_ident(target_schema)));
  EXECUTE format('COMMENT ON PROCEDURE %I.svc_encrypt_column(regclass, name, text, integer, name) IS %L', target_schema, $c$Encrypts a text column in place in chunks, committing each; skips values already in ciphertext shape, so it resumes after an interruption.$c$);
  EXECUTE format('CREATE OR REPLACE PROCEDURE %I.svc_decrypt_column(tbl regclass, col name, chunk_rows integer DEFAULT 10000, key_column name DEFAULT NULL) LANGUAGE plpgsql AS %L', target_schema,
    replace($p$
DECLARE
  key_col name := key_column;
  key_type text;
  read_sql text;
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
  seconds float8;
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  IF chunk_rows IS NULL OR chunk_rows < 1 THEN
    RAISE EXCEPTION 'svc_decrypt_column: chunk_rows must be a positive integer' USING ERRCODE = '22023';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped AND t.typcategory = 'S') THEN
    RAISE EXCEPTION 'svc_decrypt_column: % has no text column %', tbl, col USING ERRCODE = '42703';
  END IF;
  IF key_col IS NULL THEN
    SELECT a.attname INTO key_col
      FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE i.indrelid = tbl AND i.indisprimary AND i.indnkeyatts = 1;
    IF key_col IS NULL THEN
      RAISE EXCEPTION 'svc_decrypt_column: % has no single-column primary key', tbl
        USING ERRCODE = '22023', HINT = 'Pass key_column => a unique, not-null column to walk the table by.';
    END IF;
  END IF;
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO key_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = tbl AND a.attname = key_col AND a.attnum > 0 AND NOT a.attisdropped;
  IF key_type IS NULL THEN
    RAISE EXCEPTION 'svc_decrypt_column: % has no column %', tbl, key_col USING ERRCODE = '42703';
  END IF;
  read_sql := format($q$
    SELECT pg_catalog.array_agg(k::text ORDER BY k), pg_catalog.array_agg(v ORDER BY k) FROM (
      SELECT %3$I AS k, %2$I::text AS v FROM %1$s
       WHERE ($1::text IS NULL OR %3$I > $1::%4$s) AND %2$I IS NOT NULL AND (%2$I ~ '^hub:[A-Za-z0-9_.-]+:[A-Za-z0-9_-]+$' AND pg_catalog.length(pg_catalog.split_part(%2$I, ':', 2)) <= 128)
       ORDER BY %3$I LIMIT $2) AS chunk$q$, tbl, col, key_col, key_type);
  write_sql := format($q$
    UPDATE %1$s t SET %2$I = u.new
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS u(k, old, new)
     WHERE t.%3$I = u.k::%4$s AND t.%2$I::text = u.old$q$, tbl, col, key_col, key_type);
  -- The first chunk is small and each next one twice the last, up to chunk_rows, so the procedure does not
  -- sit idle while the engine does a whole first chunk.
  take := least(chunk_rows, 1000);
  BEGIN
    EXECUTE read_sql INTO keys, vals USING NULL::text, take;
    IF keys IS NOT NULL THEN
      PERFORM @SCHEMA@.svc_array_send('decrypt', vals, NULL);
    END IF;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
    IF e_detail <> '' AND e_hint <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    ELSIF e_detail <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSIF e_hint <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
  END;
  WHILE keys IS NOT NULL LOOP
    BEGIN
      take := least(chunk_rows::bigint, take::bigint * 2);
      EXECUTE read_sql INTO next_keys, next_vals USING keys[pg_catalog.cardinality(keys)], take;
      IF next_keys IS NOT NULL THEN
        PERFORM @SCHEMA@.svc_array_send('decrypt', next_vals, NULL);
      END IF;
      results := @SCHEMA@.svc_array_collect('decrypt', vals, NULL);
      EXECUTE write_sql USING keys, vals, results;
      GET DIAGNOSTICS written = ROW_COUNT;
      wanted := pg_catalog.cardinality(keys);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
      e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
      IF e_detail <> '' AND e_hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
      ELSIF e_detail <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
      ELSIF e_hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
      END IF;
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    END;
    COMMIT;
    examined := examined + pg_catalog.cardinality(keys);
    done := done + written;
    skipped := skipped + wanted - written;
    keys := next_keys;
    vals := next_vals;
    seconds := greatest(extract(epoch FROM clock_timestamp() - started)::float8, 0.000001);
    RAISE NOTICE 'svc_decrypt_column: % rows done, % rows/s', done, round(done / seconds);
  END LOOP;
  IF skipped > 0 THEN
    RAISE NOTICE 'svc_decrypt_column: % rows changed by another session while their chunk was at the engine were left as written; call the procedure again to do them', skipped;
  END IF;
  RAISE NOTICE 'svc_decrypt_column: finished, % rows in % s', done, round(extract(epoch FROM clock_timestamp() - started)::numeric, 3);
END
$p$, '@SCHEMA@', quote_ident(target_schema)));
  EXECUTE format('COMMENT ON PROCEDURE %I.svc_decrypt_column(regclass, name, integer, name) IS %L', target_schema, $c$Decrypts a text column in place in chunks, committing each; skips values not in ciphertext shape, so it resumes after an interruption.$c$);
  EXECUTE format('REVOKE ALL ON PROCEDURE %I.svc_encrypt_column(regclass, name, text, integer, name) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON PROCEDURE %I.svc_encrypt_column(regclass, name, text, integer, name) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON PROCEDURE %I.svc_decrypt_column(regclass, name, integer, name) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON PROCEDURE %I.svc_decrypt_column(regclass, name, integer, name) TO svc_user', target_schema);
END
$svc_install$;

DO $svc_install$
DECLARE
  target_schema text := current_schema();
BEGIN
  IF to_regprocedure(format('%I.svc_array_send(text, text[], text)', target_schema)) IS NULL THEN
    RAISE EXCEPTION 'svc bridge: install the bridge functions (0001-install-bridge.sql) in schema % first', target_schema
      USING ERRCODE = 'SV003';
  END IF;
  -- Neither SET search_path nor STRICT: either keeps this one-expression function from being inlined
  -- (NULL in still gives NULL out); every name is qualified.
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_key_version(data text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
    target_schema, $f$
  SELECT CASE WHEN data ~ '^hub:[A-Za-z0-9_.-]+:AQ[A-Za-z0-9_-]{6}' THEN
    nullif(greatest(('x' || pg_catalog.substr(pg_catalog.encode(pg_catalog.decode(pg_catalog.translate(
      pg_catalog.substr(pg_catalog.split_part(data, ':', 3), 1, 8), '-_', '+/'), 'base64'), 'hex'), 5, 8))::pg_catalog.bit(32)::integer, -1), -1)
  END$f$);
  EXECUTE format('COMMENT ON FUNCTION %I.svc_key_version(text) IS %L', target_schema, $c$The key version recorded in a ciphertext's header, read without the engine; NULL when the value is not a ciphertext.$c$);
  EXECUTE format('CREATE OR REPLACE FUNCTION %I.svc_key_versions(tbl regclass, col name)
      RETURNS TABLE (policy_code text, key_version integer, value_count bigint)
      LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS %L', target_schema, replace($f$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped AND t.typcategory = 'S') THEN
    RAISE EXCEPTION 'svc_key_versions: % has no text column %', tbl, col USING ERRCODE = '42703';
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT CASE WHEN (v ~ ''^hub:[A-Za-z0-9_.-]+:[A-Za-z0-9_-]+$'' AND pg_catalog.length(pg_catalog.split_part(v, '':'', 2)) <= 128) THEN pg_catalog.split_part(v, '':'', 2) END,
            @SCHEMA@.svc_key_version(v), pg_catalog.count(*)
       FROM (SELECT %2$I::text AS v FROM %1$s WHERE %2$I IS NOT NULL) AS s GROUP BY 1, 2 ORDER BY 1, 2',
    tbl, col);
END$f$, '@SCHEMA@', quote_ident(target_schema)));
  EXECUTE format('COMMENT ON FUNCTION %I.svc_key_versions(regclass, name) IS %L', target_schema, $c$Counts a column's values per policy and key version (policy_code and key_version NULL: not a ciphertext), to see that no value of an old version remains before retiring it.$c$);
  -- No SET search_path: a procedure with a SET clause cannot COMMIT; every name inside is qualified.
  EXECUTE format('CREATE OR REPLACE PROCEDURE %I.svc_rewrap_column(tbl regclass, col name, chunk_rows integer DEFAULT 10000,
      key_column name DEFAULT NULL, dry_run boolean DEFAULT false) LANGUAGE plpgsql AS %L', target_schema, replace($p$
DECLARE
  key_col name := key_column;
  key_type text;
  -- The newest key version per policy code, learnt from what rewrap answers: values already there are
  -- skipped without a round trip, so a second run only reads the table (but for the first two chunks,
  -- read before the first answer is in).
  newest jsonb := '{}';
  counted record;
  read_sql text;
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
  seconds float8;
  e_state text; e_message text; e_detail text; e_hint text;
BEGIN
  IF chunk_rows IS NULL OR chunk_rows < 1 THEN
    RAISE EXCEPTION 'svc_rewrap_column: chunk_rows must be a positive integer' USING ERRCODE = '22023';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped AND t.typcategory = 'S') THEN
    RAISE EXCEPTION 'svc_rewrap_column: % has no text column %', tbl, col USING ERRCODE = '42703';
  END IF;
  IF key_col IS NULL THEN
    SELECT a.attname INTO key_col
      FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE i.indrelid = tbl AND i.indisprimary AND i.indnkeyatts = 1;
    IF key_col IS NULL THEN
      RAISE EXCEPTION 'svc_rewrap_column: % has no single-column primary key', tbl
        USING ERRCODE = '22023', HINT = 'Pass key_column => a unique, not-null column to walk the table by.';
    END IF;
  END IF;
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO key_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = tbl AND a.attname = key_col AND a.attnum > 0 AND NOT a.attisdropped;
  IF key_type IS NULL THEN
    RAISE EXCEPTION 'svc_rewrap_column: % has no column %', tbl, key_col USING ERRCODE = '42703';
  END IF;
  IF dry_run THEN
    FOR counted IN SELECT * FROM @SCHEMA@.svc_key_versions(tbl, col) LOOP
      RAISE NOTICE 'svc_rewrap_column (dry run): policy %, key version %: % values', coalesce(counted.policy_code, '(not a ciphertext)'),
        coalesce(counted.key_version::text, '-'), counted.value_count;
    END LOOP;
    RETURN;
  END IF;
  read_sql := format($q$
    SELECT pg_catalog.array_agg(k::text ORDER BY k), pg_catalog.array_agg(v ORDER BY k) FROM (
      SELECT %3$I AS k, %2$I::text AS v FROM %1$s
       WHERE ($1::text IS NULL OR %3$I > $1::%4$s) AND %2$I IS NOT NULL AND (%2$I ~ '^hub:[A-Za-z0-9_.-]+:[A-Za-z0-9_-]+$' AND pg_catalog.length(pg_catalog.split_part(%2$I, ':', 2)) <= 128)
         AND NOT coalesce(@SCHEMA@.svc_key_version(%2$I) >= ($3::jsonb ->> pg_catalog.split_part(%2$I, ':', 2))::integer, false)
       ORDER BY %3$I LIMIT $2) AS chunk$q$, tbl, col, key_col, key_type);
  write_sql := format($q$
    UPDATE %1$s t SET %2$I = u.new
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS u(k, old, new)
     WHERE t.%3$I = u.k::%4$s AND t.%2$I::text = u.old AND u.new IS DISTINCT FROM u.old$q$, tbl, col, key_col, key_type);
  -- The first chunk is small and each next one twice the last, up to chunk_rows, so the procedure does not
  -- sit idle while the engine does a whole first chunk.
  take := least(chunk_rows, 1000);
  BEGIN
    EXECUTE read_sql INTO keys, vals USING NULL::text, take, newest;
    IF keys IS NOT NULL THEN
      PERFORM @SCHEMA@.svc_array_send('rewrap', vals, NULL);
    END IF;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
    IF e_detail <> '' AND e_hint <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    ELSIF e_detail <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSIF e_hint <> '' THEN
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
  END;
  WHILE keys IS NOT NULL LOOP
    BEGIN
      take := least(chunk_rows::bigint, take::bigint * 2);
      EXECUTE read_sql INTO next_keys, next_vals USING keys[pg_catalog.cardinality(keys)], take, newest;
      IF next_keys IS NOT NULL THEN
        PERFORM @SCHEMA@.svc_array_send('rewrap', next_vals, NULL);
      END IF;
      results := @SCHEMA@.svc_array_collect('rewrap', vals, NULL);
      EXECUTE write_sql USING keys, vals, results;
      GET DIAGNOSTICS written = ROW_COUNT;
      SELECT pg_catalog.count(*) INTO wanted FROM ROWS FROM (pg_catalog.unnest(vals), pg_catalog.unnest(results)) AS u(old, new) WHERE u.new IS DISTINCT FROM u.old;
      newest := newest || coalesce((SELECT pg_catalog.jsonb_object_agg(p, m) FROM (
        SELECT pg_catalog.split_part(v, ':', 2) AS p, pg_catalog.max(@SCHEMA@.svc_key_version(v)) AS m
          FROM pg_catalog.unnest(results) AS v GROUP BY 1) AS x), '{}');
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
      e_message := pg_catalog.regexp_replace(e_message, '^plpy\.(SPI)?Error: ', '');
      IF e_detail <> '' AND e_hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
      ELSIF e_detail <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
      ELSIF e_hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
      END IF;
      RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    END;
    COMMIT;
    examined := examined + pg_catalog.cardinality(keys);
    done := done + written;
    skipped := skipped + wanted - written;
    keys := next_keys;
    vals := next_vals;
    seconds := greatest(extract(epoch FROM clock_timestamp() - started)::float8, 0.000001);
    RAISE NOTICE 'svc_rewrap_column: % values examined, % rewrapped, % values/s', examined, done, round(examined / seconds);
  END LOOP;
  IF skipped > 0 THEN
    RAISE NOTICE 'svc_rewrap_column: % rows changed by another session while their chunk was at the engine were left as written; call the procedure again to do them', skipped;
  END IF;
  RAISE NOTICE 'svc_rewrap_column: finished, % values rewrapped of % examined in % s', done, examined,
    round(extract(epoch FROM clock_timestamp() - started)::numeric, 3);
END
$p$, '@SCHEMA@', quote_ident(target_schema)));
  EXECUTE format('COMMENT ON PROCEDURE %I.svc_rewrap_column(regclass, name, integer, name, boolean) IS %L', target_schema, $c$Rewraps a column in place to the newest key version of each value's policy, in chunks, committing each; skips values already there, so a second run is cheap and an interrupted one resumes. dry_run only counts values per key version.$c$);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_key_version(text) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_key_version(text) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.svc_key_versions(regclass, name) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON FUNCTION %I.svc_key_versions(regclass, name) TO svc_user', target_schema);
  EXECUTE format('REVOKE ALL ON PROCEDURE %I.svc_rewrap_column(regclass, name, integer, name, boolean) FROM PUBLIC', target_schema);
  EXECUTE format('GRANT EXECUTE ON PROCEDURE %I.svc_rewrap_column(regclass, name, integer, name, boolean) TO svc_user', target_schema);
END
$svc_install$;
