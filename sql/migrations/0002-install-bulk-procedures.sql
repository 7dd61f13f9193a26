-- Generated from udf/ by `npm run sql -w udf`; do not edit by hand (a test compares this file with the generator).
-- Installs svc_encrypt_column / svc_decrypt_column: in-place, chunked, resumable bulk work on a column.
-- Needs 0001. One DO statement: one transaction under any runner; idempotent. See docs/sql.md.
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
