// Compiles the plv8 bridge (src/plv8/bridge.ts, a module without run-time imports) into one JavaScript
// expression that evaluates to the module's exports, for embedding in plv8 function bodies: plv8 runs
// scripts, not modules, so the CommonJS output is wrapped in a function that supplies `exports`.
import ts from 'typescript';

export function bundlePlv8(source: string): string {
  const { outputText, diagnostics } = ts.transpileModule(source, {
    fileName: 'bridge.ts',
    reportDiagnostics: true,
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2019,
      removeComments: true,
      strict: true,
    },
  });
  if (diagnostics && diagnostics.length > 0) {
    const text = diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n');
    throw new Error(`plv8 bridge does not compile:\n${text}`);
  }
  if (/\brequire\(/.test(outputText)) throw new Error('the plv8 bridge must not import anything at run time');
  return `(function () {\nvar exports = {};\n${outputText.trim()}\nreturn exports;\n})()`;
}
