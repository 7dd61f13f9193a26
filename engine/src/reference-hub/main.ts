// Entry point of the reference hub: `node engine/dist/reference-hub/main.js`. Settings from the
// environment: SVC_HUB_HOST (127.0.0.1), SVC_HUB_PORT (9100), SVC_HUB_STATE_FILE (keeps tenants,
// policies and keys across restarts), SVC_HUB_PUBLIC_URL (the URL engines are told to call),
// SVC_HUB_ADMIN_TOKEN (guards /hub/admin), SVC_LOG_LEVEL. For tests and demos, not production.
import { buildHubApp } from './hub-app.js';
import { HubState } from './hub-state.js';

function port(value: string | undefined): number {
  const parsed = Number(value ?? '9100');
  if (!Number.isInteger(parsed) || parsed < 0 || parsed > 65535) {
    throw new Error(`SVC_HUB_PORT must be a port number (got ${value})`);
  }
  return parsed;
}

async function main(): Promise<void> {
  const env = process.env;
  const state = await HubState.load(env.SVC_HUB_STATE_FILE || undefined);
  const app = buildHubApp({
    state,
    publicUrl: env.SVC_HUB_PUBLIC_URL || undefined,
    adminToken: env.SVC_HUB_ADMIN_TOKEN || undefined,
    logger: { level: env.SVC_LOG_LEVEL || 'info' },
  });
  const address = await app.listen({ host: env.SVC_HUB_HOST || '127.0.0.1', port: port(env.SVC_HUB_PORT) });
  app.log.info({ address, tenants: state.tenants.size }, `hub listening on ${address}`);
  const shutdown = async (signal: string) => {
    app.log.info({ signal }, 'hub shutting down');
    await app.close();
    await state.flushed();
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((error: unknown) => {
  console.error(`reference hub failed to start: ${(error as Error).message}`);
  process.exit(1);
});
