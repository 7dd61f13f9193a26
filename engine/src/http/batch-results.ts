// The JSON batch result objects of the contract, in its field order. Pure formatting with nothing of
// HTTP in it, so the crypto workers can write their slices' results as JSON text (docs/workers.md)
// exactly as the main thread would.
import type { ItemOutcome } from '../core/execution-service.js';

export type BatchOperation = 'encrypt' | 'decrypt' | 'rewrap';

const SUCCESS_MESSAGE: Record<BatchOperation, string> = {
  encrypt: 'encrypt succeeded',
  decrypt: 'decrypt succeeded',
  rewrap: 'rewrap succeeded',
};

export function originalData(item: unknown): string | undefined {
  const data = (item as { data?: unknown } | null)?.data;
  return typeof data === 'string' ? data : undefined;
}

/** One item's result object (undefined fields are left out when serialized). */
export function resultObject(operation: BatchOperation, outcome: ItemOutcome, item: unknown) {
  if (outcome.ok) {
    return {
      success: true,
      code: 1000,
      message: SUCCESS_MESSAGE[operation],
      originalData: originalData(item),
      [operation === 'decrypt' ? 'decryptedData' : 'encryptedData']: outcome.data,
      policyCode: outcome.policyCode,
    };
  }
  return {
    success: false,
    code: 2000,
    message: outcome.error.message,
    originalData: originalData(item),
    policyCode: outcome.policyCode,
  };
}
