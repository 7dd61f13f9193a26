// Route schemas: they document the API (OpenAPI) and make response serialization fast and exact
// (fields not in a schema are never sent). Request bodies are validated by the core, not by these,
// so that every transport applies the same rules with the same messages.
import { Type } from 'typebox';

/** `{"error": ...}` or `{"success": false, "error": ...}`, as the contract prescribes per condition. */
export const ErrorBody = Type.Object({ success: Type.Optional(Type.Literal(false)), error: Type.String() });

export const EncryptBody = Type.Object({
  data: Type.String({ description: 'Plaintext to encrypt' }),
  policyCode: Type.Optional(Type.String({ description: 'Fixed policy code; cannot be combined with policyName' })),
  policyName: Type.Optional(Type.String({ description: 'Latest policy by name, used when policyCode is absent' })),
  policyVersion: Type.Optional(Type.Integer({ minimum: 1, description: 'Only together with policyName' })),
});

export const DecryptBody = Type.Object({
  data: Type.String({ description: 'Ciphertext `hub:<policy_code>:<rest>`' }),
});

export const SingleResponse = Type.Object({
  success: Type.Boolean(),
  data: Type.String(),
  policyCode: Type.String(),
});

export function batchBody(item: typeof EncryptBody | typeof DecryptBody | typeof RewrapBody) {
  return Type.Object({
    items: Type.Optional(Type.Array(item, { description: 'The standard field' })),
    requests: Type.Optional(Type.Array(item, { description: 'Accepted for backward compatibility' })),
  });
}

export const BatchResponse = Type.Object({
  success: Type.Boolean({ description: 'true when every item succeeded' }),
  transportMode: Type.String(),
  results: Type.Array(
    Type.Object({
      success: Type.Boolean(),
      code: Type.Integer({ description: '1000 success, 2000 failure' }),
      message: Type.String(),
      originalData: Type.Optional(Type.String()),
      encryptedData: Type.Optional(Type.String()),
      decryptedData: Type.Optional(Type.String()),
      policyCode: Type.Optional(Type.String()),
    }),
  ),
  totalProcessed: Type.Integer(),
  totalSuccess: Type.Integer(),
  totalFailed: Type.Integer(),
  totalProcessingTime: Type.Integer({ description: 'milliseconds' }),
});

export const errorResponses = Object.fromEntries(
  [400, 404, 405, 409, 413, 415, 422, 503].map((status) => [status, ErrorBody]),
) as Record<400 | 404 | 405 | 409 | 413 | 415 | 422 | 503, typeof ErrorBody>;

export const RewrapBody = Type.Object({
  data: Type.String({ description: 'Ciphertext `hub:<policy_code>:<rest>`; no policy field (the ciphertext keeps its policy)' }),
});

export const EqualityTermsResponse = Type.Object({
  success: Type.Boolean(),
  terms: Type.Array(Type.String(), { description: 'One ciphertext per key version that can decrypt, newest first' }),
  policyCode: Type.String(),
});
