// Backend messages the listener sends beyond what pg-gateway writes itself (it handles start-up,
// SCRAM, TLS and errors): result sets and command completion. Each is framed by pg-protocol's Writer
// (type byte, length); an answer goes out as one buffer, so a 10000-row result is one socket write.
import { BackendError } from 'pg-gateway';
import { Writer } from 'pg-protocol/dist/buffer-writer.js';
import type { Answer, Column } from './commands.js';

const ROW_DESCRIPTION = 0x54; // 'T'
const DATA_ROW = 0x44; // 'D'
const COMMAND_COMPLETE = 0x43; // 'C'
const EMPTY_QUERY = 0x49; // 'I'
const READY_FOR_QUERY = 0x5a; // 'Z'
const PARAMETER_STATUS = 0x53; // 'S'

const TYPE_SIZE: Readonly<Record<number, number>> = { 16: 1, 23: 4, 25: -1 };

function rowDescription(writer: Writer, columns: readonly Column[]): Buffer {
  writer.addInt16(columns.length);
  for (const column of columns) {
    writer
      .addCString(column.name)
      .addInt32(0) // not a table column
      .addInt16(0)
      .addInt32(column.type)
      .addInt16(TYPE_SIZE[column.type] ?? -1)
      .addInt32(-1) // no type modifier
      .addInt16(0); // text format
  }
  return writer.flush(ROW_DESCRIPTION);
}

function dataRow(writer: Writer, row: readonly (string | null)[]): Buffer {
  writer.addInt16(row.length);
  for (const value of row) {
    if (value === null) writer.addInt32(-1);
    else writer.addInt32PrefixedString(value);
  }
  return writer.flush(DATA_ROW);
}

export function readyForQuery(): Buffer {
  return new Writer().addString('I').flush(READY_FOR_QUERY);
}

export function parameterStatus(name: string, value: string): Buffer {
  return new Writer().addCString(name).addCString(value).flush(PARAMETER_STATUS);
}

export function errorMessage(
  severity: 'ERROR' | 'FATAL',
  code: string,
  message: string,
  detail?: string,
): Uint8Array {
  return BackendError.create({ severity, code, message, detail }).flush();
}

/** The whole answer to one simple query, ReadyForQuery included. */
export function answerMessages(answer: Answer): Buffer {
  const writer = new Writer();
  const parts: Uint8Array[] = [];
  switch (answer.kind) {
    case 'rows':
      parts.push(rowDescription(writer, answer.columns));
      for (const row of answer.rows) parts.push(dataRow(writer, row));
      parts.push(writer.addCString(answer.tag).flush(COMMAND_COMPLETE));
      break;
    case 'done':
      parts.push(writer.addCString(answer.tag).flush(COMMAND_COMPLETE));
      break;
    case 'empty':
      parts.push(writer.flush(EMPTY_QUERY));
      break;
    case 'error':
      parts.push(errorMessage('ERROR', answer.code, answer.message, answer.detail));
      break;
  }
  parts.push(readyForQuery());
  return Buffer.concat(parts);
}
