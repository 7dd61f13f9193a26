// Builds the audit trail from its configuration: the sinks, fail-closed, and the fingerprint key
// (derived from the master key, so engines sharing a master key fingerprint a tenant alike).
import { hkdfSync } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { AuditConfig } from '../config.js';
import { type AuditSink, AuditTrail } from '../core/audit.js';
import { DEFAULT_FILE_SINK_OPTIONS, FileAuditSink, type SinkLog } from './file-sink.js';
import { StdoutAuditSink } from './stdout-sink.js';

export function openAuditTrail(config: AuditConfig, masterKey: Uint8Array, log: SinkLog): AuditTrail {
  const sinks: AuditSink[] = [];
  if (config.file !== undefined) {
    try {
      // The default lives in the data directory, which need not exist yet when the store is PostgreSQL.
      mkdirSync(dirname(config.file), { recursive: true, mode: 0o700 });
    } catch {
      // the sink reports the file as unwritable and keeps retrying
    }
    sinks.push(
      new FileAuditSink(
        config.file,
        { ...DEFAULT_FILE_SINK_OPTIONS, flushIntervalMs: config.flushIntervalMs, fsyncIntervalMs: config.fsyncIntervalMs },
        log,
      ),
    );
  }
  if (config.stdout) sinks.push(new StdoutAuditSink());
  if (sinks.length === 0) {
    log.warn({}, 'AUDIT IS OFF (SVC_AUDIT_FILE=off and SVC_AUDIT_STDOUT is not true): no call is recorded');
  } else {
    log.info({ file: config.file, stdout: config.stdout, failClosed: config.failClosed }, 'audit trail on');
  }
  const fingerprintKey = Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'svc audit tenant fingerprint', 32));
  return new AuditTrail(sinks, { failClosed: config.failClosed, fingerprintKey });
}
