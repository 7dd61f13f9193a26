// Health probe for containers whose engine listens on loopback only (the image's HEALTHCHECK, the compose
// stack, the Kubernetes sidecar's exec probes): exits 0 when GET http://127.0.0.1:$SVC_PORT<path> answers
// 2xx within 2 s, 1 otherwise. Path: the first argument, default /api/health/ready (readiness).
const path = process.argv[2] ?? '/api/health/ready';
const port = process.env.SVC_PORT || '8080';
try {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(2000) });
  process.exit(res.ok ? 0 : 1);
} catch {
  process.exit(1);
}
