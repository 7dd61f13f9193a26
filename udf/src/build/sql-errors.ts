// How the SQL surface raises errors: the bridge's own (SV001–SV003) and a bulk procedure's reach the caller
// with their SQLSTATE, message, DETAIL and HINT, and a CONTEXT naming only the function called.

/**
 * PL/pgSQL statements raising the caught error again with only its SQLSTATE, message, detail and hint:
 * no CONTEXT from inside the bridge (PL/Python's traceback, a bulk procedure's internal statement), and no
 * "plpy.Error: " prefix. An empty detail or hint is left out rather than printed as an empty line. Needs
 * the variables of ERROR_VARIABLES; cancels and statement timeouts are never caught (WHEN OTHERS skips them).
 */
export const ERROR_VARIABLES = 'e_state text; e_message text; e_detail text; e_hint text;';

export function raiseAgain(indent: string): string {
  const raise = (extra: string) => `RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message${extra};`;
  return [
    'GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;',
    "e_message := pg_catalog.regexp_replace(e_message, '^plpy\\.(SPI)?Error: ', '');",
    "IF e_detail <> '' AND e_hint <> '' THEN",
    `  ${raise(', DETAIL = e_detail, HINT = e_hint')}`,
    "ELSIF e_detail <> '' THEN",
    `  ${raise(', DETAIL = e_detail')}`,
    "ELSIF e_hint <> '' THEN",
    `  ${raise(', HINT = e_hint')}`,
    'END IF;',
    raise(''),
  ]
    .map((line) => indent + line)
    .join('\n');
}

/**
 * The bridge's own errors: the SV class (SV001 to SV003, docs/sql.md), a multi-dimensional array given to
 * an array form (2202E), and the two svc_array_send and svc_array_collect raise for arguments that do not
 * fit (22023) and for a collect with nothing sent (55000).
 */
export const BRIDGE_ERRORS = "SQLSTATE 'SV000' OR SQLSTATE '2202E' OR SQLSTATE '22023' OR SQLSTATE '55000'";

/**
 * A public function's PL/pgSQL body (`[DECLARE …] BEGIN … END`) with a handler that raises the bridge's
 * errors again clean (raiseAgain): whatever the bridge, CONTEXT names the function called, not the
 * internal functions, statements or Python frames behind it.
 */
export function withCleanErrors(body: string): string {
  const declared = /^\s*DECLARE\b/.test(body)
    ? body.replace(/DECLARE\b/, `DECLARE\n  ${ERROR_VARIABLES}`)
    : `\nDECLARE\n  ${ERROR_VARIABLES}${body}`;
  if (!/\nEND$/.test(declared)) throw new Error('a function body must end with END on a line of its own');
  return declared.replace(/\nEND$/, `\nEXCEPTION WHEN ${BRIDGE_ERRORS} THEN\n${raiseAgain('  ')}\nEND`);
}
