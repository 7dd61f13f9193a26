// GET /runtime/info: what this engine is and how it stands: version, status, provider family,
// capabilities, runtime version, cache counts, hub and store health, per key version usage.
import type { FastifyPluginAsync } from 'fastify';
import { usageReport } from '../../../store/usage-report.js';
import type { OperationsDeps } from './deps.js';
import { RuntimeInfo } from './schemas.js';

export const runtimeInfoRoute: FastifyPluginAsync<OperationsDeps> = async (app, deps) => {
  app.get('/runtime/info', { schema: { response: { 200: RuntimeInfo } } }, async () => {
    const { agent, manager } = deps;
    const snapshot = manager.cache.current;
    const keyUsage = usageReport(manager.cache);
    return {
      engineVersion: deps.engineVersion,
      status: agent.status,
      providerFamily: deps.providerFamily,
      capabilities: [...deps.capabilities],
      runtimeVersion: snapshot.runtimeVersion,
      hubUrl: agent.identity?.hubUrl ?? null,
      cache: { policyCount: snapshot.policyCount, keyCount: snapshot.keyCount },
      lastHeartbeatAt: manager.lastHeartbeatAt?.toISOString() ?? null,
      lastSyncAt: manager.lastSyncAt?.toISOString() ?? null,
      lastHeartbeatError: agent.lastHeartbeatError,
      lastApplyError: agent.lastApplyError,
      store: manager.health,
      keyUsage,
      keyUsageWarning: keyUsage.some((k) => k.nearLimit),
      retired: { policyCount: snapshot.retiredPolicyCount, keyCount: snapshot.retiredKeyCount },
      destroyedKeys: snapshot.destroyed.map((d) => ({
        alias: d.alias,
        version: d.version,
        destroyedAt: new Date(d.destroyedAt).toISOString(),
      })),
      minDecryptionVersions: [...snapshot.minDecryptionVersions].map(([alias, minDecryptionVersion]) => ({
        alias,
        minDecryptionVersion,
      })),
      heldBackSnapshot: agent.heldBack,
    };
  });
};
