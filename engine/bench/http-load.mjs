// HTTP load for the request/response figures: autocannon with keep-alive connections against a server
// in another process. Any error, timeout, non-2xx status or body that fails its check aborts the
// benchmark: a figure measured over failures means nothing.
import autocannon from 'autocannon';

/** POSTs `body` over `connections` keep-alive connections for `seconds`; returns requests/s and the count. */
export async function postLoad({ url, body, contentType, connections, seconds, verifyBody }) {
  const result = await autocannon({
    url,
    method: 'POST',
    headers: { 'content-type': contentType },
    body,
    connections,
    pipelining: 1,
    duration: seconds,
    verifyBody,
  });
  const problems = [];
  if (result.errors) problems.push(`${result.errors} connection errors`);
  if (result.timeouts) problems.push(`${result.timeouts} timeouts`);
  if (result.non2xx) problems.push(`${result.non2xx} non-2xx responses`);
  if (result.mismatches) problems.push(`${result.mismatches} responses failed the body check`);
  if (result.requests.total === 0) problems.push('no response completed');
  if (problems.length > 0) throw new Error(`load on ${url}: ${problems.join(', ')}`);
  return { rate: result.requests.total / result.duration, requests: result.requests.total };
}
