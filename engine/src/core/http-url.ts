// The one rule for addresses the engine calls out to (hub, stats targets): an absolute http(s) URL.
import { errors } from './errors.js';

export function parseHttpUrl(raw: unknown, field: string): URL {
  let url: URL | undefined;
  try {
    url = typeof raw === 'string' ? new URL(raw) : undefined;
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw errors.operationInvalid(`${field} must be an absolute http or https URL`);
  }
  return url;
}
