-- Generated from udf/ by `npm run sql -w udf`; do not edit by hand (a test compares this file with the generator).
-- Removes everything the migrations installed from the schema named by svc.install_schema (default: the one
-- schema holding the install, else public), the settings svc.engine_url and svc.tenant_id of this database,
-- the schema itself when the install created it and it is empty, and the role svc_user when no database
-- still refers to it. The procedural language stays (other code may use it), and so does the foreign server
-- svc_engine (the DBA's); the foreign-data wrapper svc_bridge_fdw goes when no server uses it. One DO statement.
DO $svc_uninstall$
DECLARE
  target_schema text := coalesce(nullif(current_setting('svc.install_schema', true), ''),
    (SELECT pg_catalog.min(n.nspname::text) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE p.proname = 'svc_encrypt' HAVING pg_catalog.count(DISTINCT n.oid) = 1), 'public');
  ext_function regprocedure;
  obsolete record;
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'svc_bridge') THEN
    RAISE EXCEPTION 'svc bridge: installed as an extension here; use DROP EXTENSION svc_bridge' USING ERRCODE = 'SV003';
  END IF;
  IF to_regprocedure(format('%I.svc__dblink_connect(text)', target_schema)) IS NOT NULL THEN
    FOR ext_function IN
      SELECT p.oid::regprocedure FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
        JOIN pg_catalog.pg_proc p ON p.oid = d.objid
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND e.extname = 'dblink'
         AND d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e' AND p.proname NOT IN ('dblink_connect_u')
    LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', ext_function);
    END LOOP;
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
              WHERE p.proname = 'svc__encrypt' AND p.pronamespace = to_regnamespace(target_schema) AND l.lanname = 'plv8') THEN
    FOR ext_function IN
      SELECT p.oid::regprocedure FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
        JOIN pg_catalog.pg_proc p ON p.oid = d.objid
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND e.extname = 'http'
         AND d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
    LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', ext_function);
    END LOOP;
  END IF;
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_key_version(text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_key_versions(regclass, name)', target_schema);
  EXECUTE format('DROP PROCEDURE IF EXISTS %1$I.svc_rewrap_column(regclass, name, integer, name, boolean)', target_schema);
  EXECUTE format('DROP PROCEDURE IF EXISTS %1$I.svc_encrypt_column(regclass, name, text, integer, name)', target_schema);
  EXECUTE format('DROP PROCEDURE IF EXISTS %1$I.svc_decrypt_column(regclass, name, integer, name)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_encrypt(text, text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_encrypt_by_name(text, text, integer)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_encrypt(text, text, integer)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_decrypt(text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_encrypt(text[], text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_decrypt(text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_rewrap(text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_rewrap(text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_array_send(text, text[], text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_array_collect(text, text[], text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_equality_terms(text, text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_health()', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc_engine_info()', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__encrypt(text, text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__encrypt_by_name(text, text, integer, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__decrypt(text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__encrypt_array(text[], text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__decrypt_array(text[], text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__rewrap(text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__rewrap_array(text[], text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__array_send(text, text[], text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__array_collect(text, text[], text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__equality_terms(text, text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__health(text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__engine_info(text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_setting(text, integer, integer)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_connect(text, text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_connect(text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_failed(text, text, text, text, text, integer, integer, integer)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_array(text, text, text[])', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_ahead_key(text, text, text[], text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_ahead_state()', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_many_head(text, text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_one(text, text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_send(text, text)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__dblink_many(text, text, integer, integer)', target_schema);
  EXECUTE format('DROP FUNCTION IF EXISTS %1$I.svc__raise(text, text, text, text)', target_schema);
  -- The server svc_engine is the DBA's (it may serve an install in another schema): it stays, and with
  -- it the wrapper it needs; an unused wrapper goes.
  IF EXISTS (SELECT FROM pg_catalog.pg_foreign_data_wrapper WHERE fdwname = 'svc_bridge_fdw') THEN
    IF EXISTS (SELECT FROM pg_catalog.pg_foreign_server s JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                WHERE w.fdwname = 'svc_bridge_fdw') THEN
      RAISE NOTICE 'svc bridge: foreign-data wrapper svc_bridge_fdw kept, a server uses it'
        USING HINT = 'DROP SERVER svc_engine CASCADE; DROP FOREIGN DATA WRAPPER svc_bridge_fdw; when no install uses them.';
    ELSE
      DROP FOREIGN DATA WRAPPER svc_bridge_fdw;
    END IF;
  END IF;
  IF target_schema <> 'public' AND to_regnamespace(target_schema) IS NOT NULL THEN
    EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM svc_user', target_schema);
    IF pg_catalog.obj_description(to_regnamespace(target_schema), 'pg_namespace') LIKE 'created by the svc bridge install%'
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_class WHERE relnamespace = to_regnamespace(target_schema))
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE pronamespace = to_regnamespace(target_schema))
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_type WHERE typnamespace = to_regnamespace(target_schema)) THEN
      EXECUTE format('DROP SCHEMA %I', target_schema);
    END IF;
  END IF;
  FOR obsolete IN
    SELECT d.setrole, pg_catalog.split_part(c.setting, '=', 1) AS name
      FROM pg_catalog.pg_db_role_setting d, pg_catalog.unnest(d.setconfig) AS c(setting)
     WHERE d.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()))
       AND pg_catalog.split_part(c.setting, '=', 1) IN ('svc.engine_url', 'svc.tenant_id')
  LOOP
    IF obsolete.setrole = 0 THEN
      BEGIN
        EXECUTE format('ALTER DATABASE %I RESET %s', pg_catalog.current_database(), obsolete.name);
        RAISE NOTICE 'svc bridge: database setting % removed (nothing reads it since the foreign server svc_engine)', obsolete.name;
      EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'svc bridge: database setting % is still set, and nothing reads it', obsolete.name
          USING HINT = format('The database owner can run: ALTER DATABASE %I RESET %s;', pg_catalog.current_database(), obsolete.name);
      END;
    ELSE
      RAISE NOTICE 'svc bridge: role % still sets %, and nothing reads it', obsolete.setrole::regrole, obsolete.name
        USING HINT = format('ALTER ROLE %s RESET %s; (or ALTER ROLE ... IN DATABASE ... RESET)', obsolete.setrole::regrole, obsolete.name);
    END IF;
  END LOOP;
  -- The role is cluster-wide: it goes only when nothing in any database still refers to it.
  IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'svc_user') THEN
    BEGIN
      DROP ROLE svc_user;
    EXCEPTION WHEN dependent_objects_still_exist THEN
      RAISE NOTICE 'svc bridge: role svc_user kept, other databases still grant it privileges';
    END;
  END IF;
END
$svc_uninstall$;
