// The store's port (what the engine needs of a snapshot store, in process or not), its errors, and the
// messages between the engine and its embedded store process (structured clone over the IPC channel,
// so Dates and byte arrays travel as they are).
import type { KeyRecord, PolicyRecord } from '../core/records.js';
import type { SnapshotStore } from './snapshot-store.js';

/** The stored rows no longer match the summary written with them: start-up stops naming the way back. */
export class StoreIntegrityError extends Error {
  override readonly name = 'StoreIntegrityError';
}

/** The SnapshotStore calls the engine makes. */
export type StoreMethod = 'load' | 'saveChanges' | 'saveSnapshot' | 'saveIdentity' | 'saveState' | 'saveUsage' | 'ping' | 'close';

/** What CacheManager and the rest of the engine need of a snapshot store, in process or not. */
export type SnapshotStorePort = Pick<SnapshotStore, StoreMethod | 'driver' | 'location'>;

export interface OpenArgs {
  readonly pgliteDir: string;
  readonly engineId: string;
  readonly masterKey: Uint8Array;
  readonly logLevel: string;
}

export type StoreRequest =
  | { readonly id: number; readonly method: 'open'; readonly args: OpenArgs }
  | { readonly id: number; readonly method: StoreMethod; readonly args: unknown[] }
  /**
   * Records of the saveChanges call `id` sent ahead of it, in parts: serializing a large change in one
   * message held the engine's event loop (100 ms at 140,000 policies). Not answered.
   */
  | { readonly id: number; readonly method: 'stage'; readonly policies: readonly PolicyRecord[]; readonly keys: readonly KeyRecord[] };

export type StoreReply =
  | { readonly id: number; readonly result: unknown }
  | { readonly id: number; readonly error: { readonly name: string; readonly message: string } };
