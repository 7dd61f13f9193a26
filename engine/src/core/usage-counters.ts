// Per key version usage counters. Cells outlive snapshots, so a sync does not reset the count of
// encryptions made under a key (AES-GCM with random nonces must stay well below 2^32 per key).
//
// Encryptions are reserved ahead in blocks so a crash never under-counts: the store holds a mark
// (`reserved`) at or above the real count, and when a cell's count comes within half a block of its
// mark the owner is told (synchronously, one comparison per encryption) to persist a new mark a
// block further. A restart starts from the persisted mark: it may over-count by up to one block per
// key version, never under-count, unless the store could not take a reservation before the count
// passed the mark (then the counts past the mark are at risk, and the owner logs it).
export const DEFAULT_RESERVATION_BLOCK = 10_000;

export class UsageCell {
  #encryptions = 0;
  #refillAt = 0;
  decryptions = 0;
  /** The encryption count the store already holds (a reservation); a crash restarts from here. */
  reserved = 0;

  constructor(
    readonly alias: string,
    readonly version: number,
    readonly owner: UsageCounters,
  ) {}

  get encryptions(): number {
    return this.#encryptions;
  }

  set encryptions(value: number) {
    this.#encryptions = value;
    if (value >= this.#refillAt) {
      // Until the reservation lands, no further notice: one refill in flight per cell.
      this.#refillAt = Number.POSITIVE_INFINITY;
      this.owner.nearMark(this);
    }
  }

  /** Records a persisted mark and arms the next refill half a block before it. */
  reservedUpTo(mark: number): void {
    this.reserved = Math.max(this.reserved, mark);
    this.#refillAt = Math.max(this.#encryptions + 1, this.reserved - Math.floor(this.owner.block / 2));
  }

  /** A failed reservation: try again a tenth of a block later (not on every encryption of an outage). */
  rearm(): void {
    this.#refillAt = this.#encryptions + Math.max(1, Math.floor(this.owner.block / 10));
  }
}

export interface UsageEntry {
  readonly alias: string;
  readonly version: number;
  readonly encryptions: number;
  readonly decryptions: number;
  /** The persisted reservation mark (>= encryptions once reserved). */
  readonly reserved?: number;
}

export type NearMarkListener = (cell: UsageCell) => void;

export class UsageCounters {
  readonly #cells = new Map<string, UsageCell>();
  /** The cells by alias and version, until a cell is added (reports read them at every heartbeat and flush). */
  #sorted: UsageCell[] | undefined;
  #listener: NearMarkListener | undefined;

  constructor(readonly block = DEFAULT_RESERVATION_BLOCK) {}

  /** Who persists reservations (the cache manager); without one, cells never ask again. */
  onNearMark(listener: NearMarkListener): void {
    this.#listener = listener;
  }

  nearMark(cell: UsageCell): void {
    this.#listener?.(cell);
  }

  cell(alias: string, version: number): UsageCell {
    const id = `${alias}\u0000${version}`;
    let entry = this.#cells.get(id);
    if (!entry) {
      entry = new UsageCell(alias, version, this);
      this.#cells.set(id, entry);
      this.#sorted = undefined;
    }
    return entry;
  }

  /** Every cell, by alias and version. */
  sorted(): readonly UsageCell[] {
    this.#sorted ??= [...this.#cells.values()].sort((a, b) => a.alias.localeCompare(b.alias) || a.version - b.version);
    return this.#sorted;
  }

  entries(): UsageEntry[] {
    return [...this.#cells.values()].map((c) => ({
      alias: c.alias,
      version: c.version,
      encryptions: c.encryptions,
      decryptions: c.decryptions,
      reserved: c.reserved,
    }));
  }
}
