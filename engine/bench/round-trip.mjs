// Out-of-band checks before each HTTP figure: the exact request the load generator will repeat is sent
// once, every item of its answer is checked, and the ciphertexts are decrypted back to the plaintexts.
// Under load only statuses and a cheap body check are verified, to keep the load generator light.
import { decodeResponseFrame } from '../dist/http/codecs/binary-frame.js';

async function post(url, body, contentType) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': contentType }, body });
  const bytes = Buffer.from(await res.arrayBuffer());
  if (res.status !== 200) throw new Error(`POST ${url} answered ${res.status}: ${bytes.toString('utf8', 0, 300)}`);
  return bytes;
}

async function decryptAll(origin, ciphertexts, expected) {
  const body = JSON.stringify({ items: ciphertexts.map((data) => ({ data })) });
  const answer = JSON.parse(await post(`${origin}/api/decrypt/batch`, body, 'application/json'));
  if (answer.totalFailed !== 0 || answer.results.length !== expected.length) {
    throw new Error(`decrypt batch: ${answer.totalFailed} of ${answer.results.length} items failed`);
  }
  answer.results.forEach((r, i) => {
    if (r.decryptedData !== expected[i]) throw new Error(`decrypt batch: item ${i} does not give its plaintext back`);
  });
}

export async function checkSingle(origin, request) {
  const answer = JSON.parse(await post(`${origin}/api/encrypt`, JSON.stringify(request), 'application/json'));
  if (answer.success !== true || !answer.data.startsWith(`hub:${request.policyCode}:`)) {
    throw new Error(`single encrypt answered ${JSON.stringify(answer).slice(0, 300)}`);
  }
  await decryptAll(origin, [answer.data], [request.data]);
}

export async function checkJsonBatch(origin, items) {
  const answer = JSON.parse(await post(`${origin}/api/encrypt/batch`, JSON.stringify({ items }), 'application/json'));
  if (answer.totalFailed !== 0 || answer.totalSuccess !== items.length) {
    throw new Error(`JSON batch: ${answer.totalFailed} failed, ${answer.totalSuccess} succeeded of ${items.length}`);
  }
  await decryptAll(
    origin,
    answer.results.map((r) => r.encryptedData),
    items.map((i) => i.data),
  );
}

export async function checkFrameBatch(origin, frame, items) {
  const answer = decodeResponseFrame(
    await post(`${origin}/api/encrypt/batch`, frame, 'application/x-svc-binary-frame'),
  );
  if (answer.totals.totalFailed !== 0 || answer.items.length !== items.length) {
    throw new Error(`binary frame batch: ${answer.totals.totalFailed} of ${answer.items.length} items failed`);
  }
  if (answer.items.some((item) => item.code !== 1000)) throw new Error('binary frame batch: an item failed');
  await decryptAll(
    origin,
    answer.items.map((item) => item.data.toString('latin1')),
    items.map((i) => i.data),
  );
}
