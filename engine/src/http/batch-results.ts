// The batch results of the contract: JSON result objects in its field order, and binary-frame result
// items. Pure formatting with nothing of HTTP in it, so the crypto workers write their slices' results
// (JSON text, frame bytes) exactly as the main thread would (docs/workers.md).
import type { AuditSummary } from '../core/audit.js';
import type { DecryptedBytes, ItemFailure, ItemOutcome } from '../core/execution-service.js';
import type { FrameOperation, FrameResult } from './codecs/binary-frame.js';

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

/**
 * A binary-frame batch's outcomes as frame results, added to the call's audit summary when there is
 * one: `items` are what the frame submitted (ciphertexts on decrypt and rewrap).
 */
export function frameResults(
  operation: FrameOperation,
  outcomes: readonly (ItemOutcome | DecryptedBytes)[],
  items: readonly unknown[],
  summary: AuditSummary | null | undefined,
): FrameResult[] {
  if (operation !== 'decrypt') {
    summary?.addAll(outcomes as ItemOutcome[], operation === 'rewrap' ? items : undefined);
    return outcomes as ItemOutcome[];
  }
  const decrypted = outcomes as (DecryptedBytes | ItemFailure)[];
  summary?.addAll(
    decrypted.map((r) => ('plaintext' in r ? { ok: true, policyCode: r.policyCode } : r)),
    items,
  );
  return decrypted.map((r) => ('plaintext' in r ? { ok: true, policyCode: r.policyCode, data: r.plaintext } : r));
}
