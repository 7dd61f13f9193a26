// Per key version usage counters. Cells outlive snapshots, so a sync does not reset the count of
// encryptions made under a key (AES-GCM with random nonces must stay well below 2^32 per key).
export interface UsageCell {
  encryptions: number;
  decryptions: number;
}

export interface UsageEntry extends UsageCell {
  readonly alias: string;
  readonly version: number;
}

export class UsageCounters {
  readonly #cells = new Map<string, UsageEntry>();

  cell(alias: string, version: number): UsageCell {
    const id = `${alias}\u0000${version}`;
    let entry = this.#cells.get(id);
    if (!entry) {
      entry = { alias, version, encryptions: 0, decryptions: 0 };
      this.#cells.set(id, entry);
    }
    return entry;
  }

  entries(): UsageEntry[] {
    return [...this.#cells.values()].map((entry) => ({ ...entry }));
  }
}
