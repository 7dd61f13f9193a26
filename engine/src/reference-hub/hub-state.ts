// The reference hub's data: tenants (one per engine runtime identity), each with the master key it
// shares with its engines, its policies, its versioned keys and a revision that names its runtime
// version. Saved to a JSON file (mode 0600) when one is configured, so a restarted hub keeps its keys.
// A test and demo tool: the state file holds key material and master keys; protect it like a secret.
import { randomBytes } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { KEY_LENGTHS } from '../core/aead.js';
import { wrapKey } from '../core/key-wrap.js';
import { type KeyRecord, type PolicyRecord, parseKeyRecord, parsePolicyRecord } from '../core/records.js';
import {
  type CryptoMetrics,
  type KeySyncRecord,
  keyCheckValue,
  type PolicySyncRecord,
  type RuntimeManifest,
  type RuntimePayload,
} from '../hub/protocol.js';

export interface EngineSighting {
  readonly engineVersion: string;
  readonly runtimeVersion: string;
  readonly status: string;
  readonly at: string;
  readonly cryptoMetrics: CryptoMetrics;
}

export interface Tenant {
  readonly tenantId: string;
  readonly masterKey: Buffer;
  revision: number;
  readonly policies: Map<string, PolicyRecord>;
  readonly keys: Map<string, KeyRecord[]>;
  lastHeartbeat: EngineSighting | null;
}

interface SavedTenant {
  tenantId: string;
  masterKey: string;
  revision: number;
  policies: PolicyRecord[];
  keys: (Omit<KeyRecord, 'material'> & { material: string })[];
}

export class HubError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export class HubState {
  readonly tenants = new Map<string, Tenant>();
  #saving: Promise<void> = Promise.resolve();

  constructor(readonly file?: string) {}

  static async load(file?: string): Promise<HubState> {
    const state = new HubState(file);
    if (!file) return state;
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      return state;
    }
    for (const saved of JSON.parse(text).tenants as SavedTenant[]) {
      const keys = new Map<string, KeyRecord[]>();
      for (const k of saved.keys) {
        const record = parseKeyRecord(k, `${saved.tenantId} key`);
        keys.set(record.alias, [...(keys.get(record.alias) ?? []), record]);
      }
      state.tenants.set(saved.tenantId, {
        tenantId: saved.tenantId,
        masterKey: Buffer.from(saved.masterKey, 'base64'),
        revision: saved.revision,
        policies: new Map(saved.policies.map((p) => [p.policyCode, parsePolicyRecord(p, `${saved.tenantId} policy`)])),
        keys,
        lastHeartbeat: null,
      });
    }
    return state;
  }

  tenant(tenantId: string): Tenant {
    const tenant = this.tenants.get(tenantId);
    if (!tenant) throw new HubError(404, `unknown tenant: ${tenantId}`);
    return tenant;
  }

  putTenant(tenantId: string, masterKeyBase64: string): Tenant {
    const masterKey = Buffer.from(masterKeyBase64, 'base64');
    if (masterKey.length !== 32) throw new HubError(400, 'masterKey must be base64 of 32 bytes');
    const existing = this.tenants.get(tenantId);
    if (existing) {
      if (!existing.masterKey.equals(masterKey)) throw new HubError(409, 'tenant exists with another master key');
      return existing;
    }
    const tenant: Tenant = {
      tenantId,
      masterKey,
      revision: 1,
      policies: new Map(),
      keys: new Map(),
      lastHeartbeat: null,
    };
    this.tenants.set(tenantId, tenant);
    return this.#changed(tenant);
  }

  putPolicy(tenantId: string, raw: unknown): PolicyRecord {
    const tenant = this.tenant(tenantId);
    const policy = this.#parse(() => parsePolicyRecord(raw, 'policy'));
    tenant.policies.set(policy.policyCode, policy);
    this.#changed(tenant);
    return policy;
  }

  /** Creates a key alias at version 1 (or adds a version); material is generated unless given (tests). */
  addKey(
    tenantId: string,
    raw: { alias?: unknown; algorithm?: unknown; material?: unknown; status?: unknown },
  ): KeyRecord {
    const tenant = this.tenant(tenantId);
    const alias = String(raw.alias ?? '');
    const versions = tenant.keys.get(alias) ?? [];
    const algorithm = raw.algorithm ?? versions.at(-1)?.algorithm;
    const material =
      typeof raw.material === 'string'
        ? raw.material
        : randomBytes(KEY_LENGTHS[algorithm === 'AES-256-SIV' ? 'AES-256-SIV' : 'AES-256-GCM']).toString('base64');
    const version = (versions.at(-1)?.version ?? 0) + 1;
    const key = this.#parse(() =>
      parseKeyRecord({ alias, version, algorithm, status: raw.status ?? 'ACTIVE', material }, 'key'),
    );
    tenant.keys.set(alias, [...versions, key]);
    this.#changed(tenant);
    return key;
  }

  /** A new ACTIVE version; earlier versions become DECRYPT_ONLY so old ciphertexts still decrypt. */
  rotateKey(tenantId: string, alias: string): KeyRecord {
    const tenant = this.tenant(tenantId);
    const versions = tenant.keys.get(alias);
    if (!versions) throw new HubError(404, `unknown key alias: ${alias}`);
    tenant.keys.set(
      alias,
      versions.map((k) => (k.status === 'ACTIVE' ? { ...k, status: 'DECRYPT_ONLY' as const } : k)),
    );
    return this.addKey(tenantId, { alias });
  }

  runtimeVersion(tenant: Tenant): string {
    return `r${tenant.revision}`;
  }

  /** Policies and keys as an engine of this tenant receives them: material wrapped under its master key. */
  payload(tenant: Tenant): RuntimePayload {
    return {
      policies: [...tenant.policies.values()].map((p): PolicySyncRecord => ({ ...p })),
      keys: [...tenant.keys.values()].flat().map(
        (k): KeySyncRecord => ({
          alias: k.alias,
          version: k.version,
          algorithm: k.algorithm,
          status: k.status,
          wrappedMaterial: wrapKey(tenant.masterKey, k.material).toString('base64'),
        }),
      ),
    };
  }

  manifest(tenant: Tenant): RuntimeManifest {
    return {
      runtimeVersion: this.runtimeVersion(tenant),
      policies: [...tenant.policies.values()].map((p) => ({ ...p })),
      keys: [...tenant.keys.values()].flat().map((k) => ({
        alias: k.alias,
        version: k.version,
        algorithm: k.algorithm,
        status: k.status,
        kcv: keyCheckValue(k.material),
      })),
    };
  }

  /** Waits for pending writes of the state file. */
  flushed(): Promise<void> {
    return this.#saving;
  }

  #parse<T>(parse: () => T): T {
    try {
      return parse();
    } catch (error) {
      throw new HubError(400, (error as Error).message);
    }
  }

  #changed(tenant: Tenant): Tenant {
    tenant.revision += 1;
    const file = this.file;
    if (file) this.#saving = this.#saving.then(() => this.#save(file));
    return tenant;
  }

  async #save(file: string): Promise<void> {
    const tenants: SavedTenant[] = [...this.tenants.values()].map((t) => ({
      tenantId: t.tenantId,
      masterKey: t.masterKey.toString('base64'),
      revision: t.revision,
      policies: [...t.policies.values()],
      keys: [...t.keys.values()].flat().map((k) => ({ ...k, material: Buffer.from(k.material).toString('base64') })),
    }));
    // Write then rename: a hub killed mid-write keeps its previous state file intact.
    await writeFile(`${file}.tmp`, JSON.stringify({ tenants }, null, 2), { mode: 0o600 });
    await rename(`${file}.tmp`, file);
  }
}
