// A stop signal during start waits until the engine can drain; a second one ends a start that hangs.
import { afterEach, expect, it } from 'vitest';
import { ShutdownSignals } from '../src/shutdown-signals.js';

const before = { SIGTERM: process.listeners('SIGTERM'), SIGINT: process.listeners('SIGINT') };

afterEach(() => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    for (const listener of process.listeners(signal)) {
      if (!before[signal].includes(listener)) process.off(signal, listener);
    }
  }
});

it('holds a signal received during start and hands it to the drain once there is one', () => {
  const exits: number[] = [];
  const signals = new ShutdownSignals((code) => exits.push(code));
  process.emit('SIGTERM');
  const handled: string[] = [];
  signals.handle((signal) => handled.push(signal));
  expect(handled).toEqual(['SIGTERM']);
  process.emit('SIGINT');
  expect(handled).toEqual(['SIGTERM', 'SIGINT']);
  expect(exits).toEqual([]);
});

it('ends the process on a second signal while start has not finished', () => {
  const exits: number[] = [];
  new ShutdownSignals((code) => exits.push(code));
  process.emit('SIGTERM');
  expect(exits).toEqual([]);
  process.emit('SIGTERM');
  expect(exits).toEqual([143]);
});
