// The stdout audit sink (SVC_AUDIT_STDOUT=true): one JSON line per event, `"type":"audit"` telling
// them apart from log lines, for platforms that collect a container's standard output.
import type { AuditSink } from '../core/audit.js';

export class StdoutAuditSink implements AuditSink {
  readonly name = 'stdout';

  constructor(readonly stream: NodeJS.WritableStream = process.stdout) {}

  write(line: string): void {
    this.stream.write(line);
  }

  writable(): boolean {
    return true;
  }

  async flush(): Promise<void> {}

  async close(): Promise<void> {}
}
