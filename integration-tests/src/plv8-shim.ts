// Runs the plv8 bridge's generated function bodies in Node, under a shim of the part of plv8 they use:
// `plv8.execute` answering the bridge's few statements. The `http` extension call becomes a real,
// synchronous HTTP request to a real engine (a worker thread does the request while this thread waits on
// Atomics.wait, as plv8 itself blocks in libcurl), and the raise helper throws an error carrying the
// SQLSTATE the way plv8 reports an SPI error (`sqlerrcode`).
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads';
import { loadSources } from '../../udf/src/build/artifacts.js';
import { javascriptPrelude } from '../../udf/src/build/install-script.js';
import { IMPLS } from '../../udf/src/build/sql-surface.js';
import { STATEMENTS } from '../../udf/src/plv8/bridge.js';

export interface ShimError extends Error {
  sqlerrcode: string;
  detail: string | null;
  hint: string | null;
}

interface HttpAnswer {
  status?: number;
  content?: string;
  error?: string;
}

const WORKER = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', async ({ request, port, flag }) => {
  let answer;
  try {
    const res = await fetch(request.url, {
      method: request.method,
      headers: request.headers,
      body: request.body ?? undefined,
      signal: AbortSignal.timeout(request.timeoutMs),
    });
    answer = { status: res.status, content: await res.text() };
  } catch (e) {
    const cause = e.cause && e.cause.code ? e.cause.code : '';
    answer = { error: e.name === 'TimeoutError' ? 'Timeout was reached' : 'Failed to connect: ' + (cause || e.message) };
  }
  port.postMessage(answer);
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
});
`;

export interface Plv8Shim {
  /** Calls the generated plv8 body of an internal function (e.g. svc__encrypt) with positional arguments. */
  call(impl: string, ...args: unknown[]): unknown;
  /** The statements executed so far (first line of each), for assertions about what the bridge asked. */
  readonly executed: string[];
  /**
   * What the catalog holds: the foreign server svc_engine (its wrapper and options, as name=value strings)
   * or none, and the tenant id of the owner's user mapping. The bridge reads it once per statement.
   */
  setServer(server: { wrapper: string; options: string[] } | null, tenantId?: string | null): void;
  close(): Promise<void>;
}

export function startPlv8Shim(schema = 'public', httpSchema = 'public'): Plv8Shim {
  const worker = new Worker(WORKER, { eval: true });
  const executed: string[] = [];
  let timeoutMs = 5000;
  let server: { wrapper: string; options: string[] } | null = null;
  let tenant: string | null = null;
  const statements = {
    prepare: STATEMENTS.prepare.replace(/@HTTP@/g, httpSchema),
    request: STATEMENTS.request.replace(/@HTTP@/g, httpSchema),
    raise: STATEMENTS.raise.replace(/@SCHEMA@/g, schema),
  };

  function syncHttp(request: Record<string, unknown>): HttpAnswer {
    const flag = new Int32Array(new SharedArrayBuffer(4));
    const { port1, port2 } = new MessageChannel();
    worker.postMessage({ request, port: port2, flag }, [port2]);
    Atomics.wait(flag, 0, 0);
    const message = receiveMessageOnPort(port1);
    port1.close();
    return message?.message as HttpAnswer;
  }

  const plv8 = {
    execute(sql: string, args: unknown[] = []): Array<Record<string, unknown>> {
      executed.push(sql);
      if (sql === statements.prepare) {
        timeoutMs = Number(args[0]);
        return [{ timeout: true, keepalive: 'on' }];
      }
      if (sql === statements.request) {
        const [method, url, headers, contentType, body] = args as [string, string, string, string | null, string | null];
        const pairs = JSON.parse(headers) as Array<[string, string]>;
        const answer = syncHttp({
          method,
          url,
          headers: Object.fromEntries([...pairs, ...(contentType ? [['Content-Type', contentType]] : [])]),
          body,
          timeoutMs,
        });
        if (answer.error !== undefined) throw shimError('XX000', answer.error, null, null);
        return [{ status: answer.status, content: answer.content }];
      }
      if (sql === STATEMENTS.server) return server && args[0] === 'svc_engine' ? [{ ...server }] : [];
      if (sql === STATEMENTS.tenant) return tenant !== null && args[0] === 'svc_engine' ? [{ tenant_id: tenant }] : [];
      if (sql === statements.raise) {
        const [code, message, detail, hint] = args as [string, string, string | null, string | null];
        throw shimError(code, message, detail, hint);
      }
      throw new Error(`plv8 shim: unexpected statement ${sql}`);
    },
  };

  const sources = loadSources();
  const prelude = javascriptPrelude(sources)
    .replace('@SCHEMA_JSON@', JSON.stringify(schema))
    .replace('@HTTP_JSON@', JSON.stringify(httpSchema));
  const bodies = new Map(
    IMPLS.map((f) => {
      const names = f.args.split(',').map((a) => a.trim().split(/\s+/)[0] as string);
      return [f.name, new Function('plv8', ...names, prelude + f.javascript) as (...a: unknown[]) => unknown];
    }),
  );

  return {
    executed,
    setServer(next, tenantId = null) {
      server = next;
      tenant = tenantId;
    },
    call(impl, ...args) {
      const body = bodies.get(impl);
      if (!body) throw new Error(`no plv8 body for ${impl}`);
      return body(plv8, ...args);
    },
    close: async () => {
      delete (globalThis as Record<string, unknown>)[`svc_bridge:${sources.javascriptHash}`];
      await worker.terminate();
    },
  };
}

function shimError(code: string, message: string, detail: string | null, hint: string | null): ShimError {
  return Object.assign(new Error(message), { sqlerrcode: code, detail, hint });
}
