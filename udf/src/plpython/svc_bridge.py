# The PL/Python side of the database bridge: turns svc_encrypt / svc_decrypt calls into requests to the
# engine's JSON batch endpoints. It is loaded once per backend (the generated SQL executes this source
# and keeps the Bridge in GD), keeps one keep-alive HTTP connection per backend, reopens it once when a
# reused connection turns out to be broken, and reports every failure as an SQL error with a documented
# SQLSTATE (docs/sql.md). It never puts data values into messages.
#
# The engine address (the options of the foreign server svc_engine, the DBA's) and the svc.* settings
# arrive as an argument (`cfg`, read by the SECURITY DEFINER SQL wrapper) rather than through plpy.execute,
# because PL/Python runs every plpy.execute in a subtransaction and parallel workers cannot start one; for
# the same reason only a non-worker backend polls for interrupts.
import http.client
import json
import select
import time
from urllib.parse import urlsplit

ITEM_FAILED = 'SV001'  # the engine refused an item (or the request): unknown policy, bad ciphertext, ...
UNAVAILABLE = 'SV002'  # the engine could not be reached, timed out, or answered something unusable
CONFIG = 'SV003'  # the engine address (server svc_engine) or a svc.* setting is missing or invalid

# The one place that holds the engine address, and the foreign-data wrapper it must be on (docs/sql.md §2).
SERVER = 'svc_engine'
BRIDGE_FDW = 'svc_bridge_fdw'
SERVER_HINT = ("CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url 'http://127.0.0.1:8080') "
               'as a superuser or the owner of the svc functions; see docs/sql.md.')

DEFAULT_TIMEOUT_MS = 5000
MAX_TIMEOUT_MS = 3600000
DEFAULT_BATCH_SIZE = 1000
MAX_BATCH_SIZE = 10000
# Characters of data per request: large values go in smaller requests so bodies stay well under the engine's limit.
MAX_REQUEST_DATA_CHARS = 2 * 1024 * 1024
# While waiting for an answer, wake up this often to let PostgreSQL process a cancel or statement_timeout.
INTERRUPT_SLICE_S = 0.05

ENGINE_CHECK_HINT = 'Check the engine directly (GET <url of server svc_engine>/api/health and one POST /api/encrypt); if it works there, the problem is between PostgreSQL and the engine.'


class Unavailable(Exception):
    """The deadline passed while waiting for the engine's answer."""


class Settings:
    # ops: the operations API's endpoint (a Settings of its own; this one when the server has no ops_url).
    __slots__ = ('url', 'scheme', 'host', 'port', 'base_path', 'timeout_s', 'timeout_ms', 'batch_size', 'tenant_id', 'ops')


class Bridge:
    def __init__(self, plpy, language='plpython3u'):
        self.plpy = plpy
        self.language = language
        # Executing any statement runs PostgreSQL's interrupt check (cancel, statement_timeout); prepared on
        # first use, and never in a parallel worker, where a worker's wait is bounded by svc.timeout_ms.
        self.tick_plan = None
        self.parallel_worker = in_parallel_worker()
        self.conn = None
        self.conn_key = None

    # ---- settings -------------------------------------------------------------------------------

    def settings(self, cfg):
        """cfg = [url, svc.timeout_ms, svc.batch_size, tenant_id, ops_url, foreign-data wrapper]: the options of the
        server svc_engine, current_setting() of the two settings, and the tenant id from the owner's user mapping."""
        url, timeout_ms, batch_size, tenant_id, ops_url, wrapper = (list(cfg or []) + [None] * 6)[:6]
        if wrapper is None:
            self.fail(CONFIG, 'the foreign server %s that holds the engine address does not exist' % SERVER, hint=SERVER_HINT)
        if wrapper != BRIDGE_FDW:
            # A server of the dblink bridge (dblink_fdw) names a PostgreSQL wire endpoint, not an HTTP one.
            self.fail(CONFIG, 'the foreign server %s is on the foreign-data wrapper %s, not %s' % (SERVER, wrapper, BRIDGE_FDW),
                      hint='Drop it and ' + SERVER_HINT)
        if url is None or url.strip() == '':
            self.fail(CONFIG, 'the foreign server %s has no option url' % SERVER,
                      hint="ALTER SERVER svc_engine OPTIONS (ADD url 'http://127.0.0.1:8080'); see docs/sql.md.")
        s = self.endpoint(url, 'url')
        s.timeout_ms = self.integer(timeout_ms, 'svc.timeout_ms', DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
        s.timeout_s = s.timeout_ms / 1000.0
        s.batch_size = self.integer(batch_size, 'svc.batch_size', DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE)
        s.tenant_id = tenant_id or None
        s.ops = s
        if ops_url is not None and ops_url.strip() != '':
            s.ops = self.endpoint(ops_url, 'ops_url')
            s.ops.timeout_ms, s.ops.timeout_s, s.ops.batch_size, s.ops.tenant_id = s.timeout_ms, s.timeout_s, s.batch_size, s.tenant_id
            s.ops.ops = s.ops
        return s

    def endpoint(self, url, option):
        """An address option of the server (url, ops_url) parsed into a Settings without the tuning values."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ('http', 'https') or not parts.hostname or parts.query or parts.fragment:
            self.fail(CONFIG, 'option %s of the foreign server %s must be an http:// or https:// URL without query, got "%s"'
                      % (option, SERVER, url))
        try:
            port = parts.port
        except ValueError:
            self.fail(CONFIG, 'option %s of the foreign server %s has an invalid port: "%s"' % (option, SERVER, url))
        s = Settings()
        s.url = url.strip().rstrip('/')
        s.scheme = parts.scheme
        s.host = parts.hostname
        s.port = port or (443 if parts.scheme == 'https' else 80)
        s.base_path = parts.path.rstrip('/')
        return s

    def integer(self, raw, name, default, maximum):
        if raw is None or raw.strip() == '':
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value < 1 or value > maximum:
            self.fail(CONFIG, '%s must be an integer from 1 to %d, got "%s"' % (name, maximum, raw))
        return value

    # ---- the SQL functions -------------------------------------------------------------------------

    def encrypt(self, cfg, data, policy_code):
        return self.run_one(cfg, 'encrypt', {'data': data, 'policyCode': policy_code})

    def encrypt_by_name(self, cfg, data, policy_name, policy_version):
        item = {'data': data, 'policyName': policy_name}
        if policy_version is not None:
            item['policyVersion'] = policy_version
        return self.run_one(cfg, 'encrypt', item)

    def decrypt(self, cfg, data):
        return self.run_one(cfg, 'decrypt', {'data': data})

    def encrypt_array(self, cfg, values, policy_code):
        return self.run_array(cfg, 'encrypt', values, lambda v: {'data': v, 'policyCode': policy_code})

    def decrypt_array(self, cfg, values):
        return self.run_array(cfg, 'decrypt', values, lambda v: {'data': v})

    def rewrap(self, cfg, data):
        return self.run_one(cfg, 'rewrap', {'data': data})

    def rewrap_array(self, cfg, values):
        return self.run_array(cfg, 'rewrap', values, lambda v: {'data': v})

    def equality_terms(self, cfg, data, policy_code):
        s = self.settings(cfg)
        path = '/api/equality-terms'
        answer = self.post_json(s, 'equality_terms', path, {'data': data, 'policyCode': policy_code})
        terms = answer.get('terms')
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s without terms' % (s.url, path), hint=ENGINE_CHECK_HINT)
        return terms

    def health(self, cfg):
        s = self.settings(cfg)
        status, body = self.exchange(s, 'GET', '/api/health', None, {})
        if status != 200:
            self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d to GET /api/health' % (s.url, status), hint=ENGINE_CHECK_HINT)
        return body.decode('utf-8')

    def engine_info(self, cfg):
        s = self.settings(cfg)
        info = {
            'engineServer': SERVER,
            'engineUrl': s.url,
            'opsUrl': s.ops.url,
            'bridge': self.language,
            'timeoutMs': s.timeout_ms,
            'batchSize': s.batch_size,
            'health': json.loads(self.health(cfg)),
        }
        # The operations API may have its own listener (the server's ops_url); the tenant id is its credential.
        headers = {'X-SVC-Tenant-Id': s.tenant_id} if s.tenant_id else {}
        status, body = self.exchange(s.ops, 'GET', '/engine/api/v1/runtime/info', None, headers)
        if status == 200:
            info['runtime'] = json.loads(body)
        else:
            info['runtime'] = None
            info['runtimeStatus'] = status
        return json.dumps(info)

    # ---- batching ---------------------------------------------------------------------------------

    def run_one(self, cfg, op, item):
        s = self.settings(cfg)
        return self.post_batch(s, op, [item], 0, 1)[0]

    def run_array(self, cfg, op, values, make_item):
        if values is None:
            return None
        out = list(values)
        positions = [i for i, v in enumerate(out) if v is not None]
        if not positions:
            return out
        s = self.settings(cfg)
        total = len(positions)
        start = 0
        while start < total:
            end = start
            size = 0
            # A request closes at batch_size items or at the byte budget (one oversized value goes alone).
            while end < total and end - start < s.batch_size:
                n = len(out[positions[end]])
                if end > start and size + n > MAX_REQUEST_DATA_CHARS:
                    break
                size += n
                end += 1
            chunk = positions[start:end]
            results = self.post_batch(s, op, [make_item(out[i]) for i in chunk], start, total)
            for i, value in zip(chunk, results):
                out[i] = value
            start = end
        return out

    def post_json(self, s, op, path, payload):
        """POST a JSON body; the answer object of a 200, or the error the engine's refusal stands for."""
        body = json.dumps(payload, ensure_ascii=False).encode('utf-8')
        status, raw = self.exchange(s, 'POST', path, body, {'Content-Type': 'application/json'})
        answer = self.parse(s, path, status, raw)
        if status != 200:
            message = answer.get('error') if isinstance(answer, dict) else None
            # {"success": false, ...} bodies and 413 are the engine refusing the data; anything else is the engine's state.
            if 400 <= status < 500 and (isinstance(answer, dict) and 'success' in answer or status == 413):
                self.fail(ITEM_FAILED, 'svc_%s: %s' % (op, message or 'HTTP %d' % status))
            self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d to POST %s%s' % (s.url, status, path, ': ' + message if message else ''),
                      hint=ENGINE_CHECK_HINT)
        return answer if isinstance(answer, dict) else {}

    def post_batch(self, s, op, items, offset, total):
        path = '/api/%s/batch' % op
        answer = self.post_json(s, op, path, {'items': items})
        results = answer.get('results')
        if not isinstance(results, list) or len(results) != len(items):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s without one result per item' % (s.url, path), hint=ENGINE_CHECK_HINT)
        # Encrypt and rewrap answer a ciphertext, decrypt a plaintext.
        field = 'decryptedData' if op == 'decrypt' else 'encryptedData'
        out = []
        for index, result in enumerate(results):
            if not result.get('success'):
                detail = 'item %d of %d' % (offset + index + 1, total) if total > 1 else None
                self.fail(ITEM_FAILED, 'svc_%s: %s' % (op, result.get('message') or 'item failed'), detail=detail)
            out.append(result.get(field))
        return out

    def parse(self, s, path, status, raw):
        try:
            return json.loads(raw)
        except ValueError:
            if status == 200:
                self.fail(UNAVAILABLE, 'engine at %s answered POST %s with a body that is not JSON' % (s.url, path), hint=ENGINE_CHECK_HINT)
            return None

    # ---- HTTP ---------------------------------------------------------------------------------------

    def exchange(self, s, method, path, body, headers):
        """One request on the backend's keep-alive connection; a broken reused connection is reopened once."""
        deadline = time.monotonic() + s.timeout_s
        for attempt in (0, 1):
            reused = self.conn is not None and self.conn_key == (s.scheme, s.host, s.port)
            try:
                conn = self.connection(s, deadline)
                # A reused socket still carries the previous call's timeout; every call gets its own deadline.
                conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                conn.request(method, s.base_path + path, body, headers)
                self.wait_readable(conn, deadline)
                conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                response = conn.getresponse()
                data = response.read()
                if response.will_close:
                    self.close()
                return response.status, data
            except Unavailable:
                self.close()
                self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.url, s.timeout_ms),
                          hint=ENGINE_CHECK_HINT)
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if isinstance(e, TimeoutError) or 'timed out' in str(e):
                    self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.url, s.timeout_ms), hint=ENGINE_CHECK_HINT)
                if reused and attempt == 0 and time.monotonic() < deadline:
                    continue
                self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.url, describe(e)), hint=ENGINE_CHECK_HINT)
            except BaseException:
                # A cancel or statement_timeout (raised by the interrupt check) leaves a request in flight.
                self.close()
                raise
        raise AssertionError('unreachable')

    def connection(self, s, deadline):
        key = (s.scheme, s.host, s.port)
        if self.conn is not None and self.conn_key == key:
            return self.conn
        self.close()
        timeout = max(deadline - time.monotonic(), 0.001)
        cls = http.client.HTTPSConnection if s.scheme == 'https' else http.client.HTTPConnection
        conn = cls(s.host, s.port, timeout=timeout)
        conn.connect()
        self.conn = conn
        self.conn_key = key
        return conn

    def wait_readable(self, conn, deadline):
        sock = conn.sock
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Unavailable()
            readable, _, _ = select.select([sock], [], [], min(remaining, INTERRUPT_SLICE_S))
            if readable:
                return
            if not self.parallel_worker:
                if self.tick_plan is None:
                    self.tick_plan = self.plpy.prepare('SELECT 1')
                self.plpy.execute(self.tick_plan)

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None
        self.conn_key = None

    def fail(self, sqlstate, message, detail=None, hint=None):
        kwargs = {'sqlstate': sqlstate}
        if detail:
            kwargs['detail'] = detail
        if hint:
            kwargs['hint'] = hint
        self.plpy.error(message, **kwargs)


def in_parallel_worker():
    # PostgreSQL names its parallel workers in the process title ("postgres: parallel worker for PID n").
    try:
        with open('/proc/self/cmdline', 'rb') as f:
            return b'parallel worker for PID' in f.read()
    except OSError:
        return False


def describe(error):
    text = str(error) or error.__class__.__name__
    return text.split('] ', 1)[-1] if text.startswith('[Errno') else text
