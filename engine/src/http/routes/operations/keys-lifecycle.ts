// POST /keys/destroy and POST /keys/min-decryption-version: the operator's explicit acts on key
// versions. Destroy erases one RETIRED or DISABLED version's material after the grace period
// (SVC_KEY_DESTROY_GRACE_HOURS); the minimum decryption version makes older versions of an alias
// refuse to decrypt while they stay in the store. Both are logged at warn with alias and version only.
import type { FastifyPluginAsync } from 'fastify';
import { errors } from '../../../core/errors.js';
import { accepts } from '../../content-type.js';
import type { OperationsDeps } from './deps.js';
import { errorResponses, KeyActResult } from './schemas.js';

function target(body: unknown, versionField: string): { alias: string; version: number } {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const { alias } = fields;
  const version = fields[versionField];
  if (typeof alias !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(alias)) {
    throw errors.operationInvalid('alias must be a string of 1 to 128 printable characters');
  }
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1 || version > 0xffff_ffff) {
    throw errors.operationInvalid(`${versionField} must be a positive integer`);
  }
  return { alias, version };
}

export const keysLifecycleRoute: FastifyPluginAsync<OperationsDeps> = async (app, { manager, keyDestroyGraceMs }) => {
  const options = {
    onRequest: accepts('application/json'),
    schema: { response: { 200: KeyActResult, ...errorResponses } },
  };
  app.post('/keys/destroy', options, async (request) => {
    const { alias, version } = target(request.body, 'version');
    await manager.destroyKey(alias, version, keyDestroyGraceMs);
    return { success: true, alias, version, status: 'DESTROYED' };
  });
  app.post('/keys/min-decryption-version', options, async (request) => {
    const { alias, version } = target(request.body, 'minDecryptionVersion');
    if (!manager.cache.current.keys.some((k) => k.alias === alias)) {
      throw errors.operationNotFound(`key alias ${alias} is not in the runtime cache`);
    }
    await manager.apply({ minDecryptionVersions: new Map([[alias, version]]) });
    request.log.warn({ alias, minDecryptionVersion: version }, 'minimum decryption version set by an operator');
    return { success: true, alias, version, status: 'MIN_DECRYPTION_VERSION' };
  });
};
