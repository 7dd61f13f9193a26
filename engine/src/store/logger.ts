// The logging surface the store and the hub link need. Fastify's pino logger satisfies it, so the
// engine logs through one logger; tests pass a recorder. Always (fields, message), never secrets.
export type LogFn = (fields: Record<string, unknown>, message: string) => void;

export interface Logger {
  readonly debug: LogFn;
  readonly info: LogFn;
  readonly warn: LogFn;
  readonly error: LogFn;
}

export const silentLogger: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };
