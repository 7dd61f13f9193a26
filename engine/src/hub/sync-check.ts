// The sync check: the local cache against the hub's manifest, record by record (check values for keys,
// never material). RETIRED records are the engine's own keep-for-decryption copies and not compared.
import { EngineError, errors } from '../core/errors.js';
import { type PolicyRecord, parsePolicyRecord, RECORD_STATUSES, type RecordStatus } from '../core/records.js';
import type { RuntimeSnapshot } from '../core/runtime-snapshot.js';
import { keyCheckValue, type ManifestKey, type RuntimeManifest } from './protocol.js';

export interface SyncDifferences {
  missing: string[];
  unexpected: string[];
  different: string[];
}

export interface SyncCheckResult {
  inSync: boolean;
  local: { runtimeVersion: string; policyCount: number; keyCount: number };
  hub: { runtimeVersion: string; policyCount: number; keyCount: number };
  policies: SyncDifferences;
  keys: SyncDifferences;
  checkedAt: string;
}

export function compareWithManifest(snapshot: RuntimeSnapshot, manifest: RuntimeManifest): SyncCheckResult {
  const { policies: hubPolicies, keys: hubKeys } = normalizeManifest(manifest);
  const local = {
    runtimeVersion: snapshot.runtimeVersion,
    policies: snapshot.policies.filter((p) => p.status !== 'RETIRED'),
    keys: snapshot.keys.filter((k) => k.status !== 'RETIRED'),
    policyCount: snapshot.policyCount,
    keyCount: snapshot.keyCount,
  };
  const policyView = (p: {
    policyName: string;
    policyVersion: number;
    algorithm: string;
    keyAlias: string;
    status: string;
  }) => `${p.policyName}|${p.policyVersion}|${p.algorithm}|${p.keyAlias}|${p.status}`;
  const policies = compare(
    new Map(local.policies.map((p) => [p.policyCode, policyView(p)])),
    new Map(hubPolicies.map((p) => [p.policyCode, policyView(p)])),
  );
  const keyName = (k: { alias: string; version: number }) => `${k.alias}@${k.version}`;
  const keys = compare(
    new Map(local.keys.map((k) => [keyName(k), `${k.algorithm}|${k.status}|${keyCheckValue(k.material)}`])),
    new Map(hubKeys.map((k) => [keyName(k), `${k.algorithm}|${k.status}|${k.kcv}`])),
  );
  const empty = (d: SyncDifferences) => d.missing.length + d.unexpected.length + d.different.length === 0;
  return {
    inSync: local.runtimeVersion === manifest.runtimeVersion && empty(policies) && empty(keys),
    local: { runtimeVersion: local.runtimeVersion, policyCount: local.policyCount, keyCount: local.keyCount },
    hub: {
      runtimeVersion: manifest.runtimeVersion,
      policyCount: manifest.policies.length,
      keyCount: manifest.keys.length,
    },
    policies,
    keys,
    checkedAt: new Date().toISOString(),
  };
}

/**
 * The manifest's records with the defaults the engine applies when it receives them (policyName =
 * policyCode, policyVersion 1, status ACTIVE, status in upper case), so a hub that leaves out optional
 * fields is compared with what a sync of the same records would have produced. A record the engine
 * would refuse makes the manifest invalid (502), as an invalid heartbeat snapshot does.
 */
function normalizeManifest(manifest: RuntimeManifest): { policies: PolicyRecord[]; keys: ManifestKey[] } {
  try {
    return {
      policies: manifest.policies.map((p, i) => parsePolicyRecord(p, `manifest.policies[${i}]`)),
      keys: manifest.keys.map((k, i) => {
        // parseKeyRecord needs material, which a manifest never carries: apply its status rule alone.
        const status = typeof k.status === 'string' ? k.status.toUpperCase() : ((k.status as unknown) ?? 'ACTIVE');
        if (!(RECORD_STATUSES as readonly unknown[]).includes(status)) {
          throw errors.invalid(`manifest.keys[${i}]: status must be one of ${RECORD_STATUSES.join(', ')}`);
        }
        return { ...k, status: status as RecordStatus };
      }),
    };
  } catch (error) {
    throw error instanceof EngineError ? errors.hubFailed(`hub sent an invalid manifest: ${error.message}`) : error;
  }
}

/** missing: at the hub, not here; unexpected: here, not at the hub; different: both, with other attributes. */
function compare(local: Map<string, string>, hub: Map<string, string>): SyncDifferences {
  const out: SyncDifferences = { missing: [], unexpected: [], different: [] };
  for (const [id, view] of hub) {
    const mine = local.get(id);
    if (mine === undefined) out.missing.push(id);
    else if (mine !== view) out.different.push(id);
  }
  for (const id of local.keys()) if (!hub.has(id)) out.unexpected.push(id);
  for (const list of Object.values(out)) list.sort();
  return out;
}
