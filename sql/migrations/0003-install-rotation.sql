-- Generated from udf/ by `npm run sql -w udf`; do not edit by hand (a test compares this file with the generator).
-- Installs key rotation on a column: svc_key_version(text), svc_key_versions(table, column) and the
-- procedure svc_rewrap_column (chunked, resumable, skipping values already at the newest key version).
-- Needs 0001. One DO statement: one transaction under any runner; idempotent. See docs/rotation.md.
DO $svc_install$
DECLARE
  target_schema text := coalesce(nullif(current_setting('svc.install_schema', true), ''),
    (SELECT pg_catalog.min(n.nspname::text) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE p.proname = 'svc_encrypt' HAVING pg_catalog.count(DISTINCT n.oid) = 1), 'public');
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
