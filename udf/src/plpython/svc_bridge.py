# The PL/Python side of the database bridge: turns svc_encrypt / svc_decrypt calls into binary-frame
# requests to the engine's batch endpoints (docs/binary-frame.md), or, with the server option wire_url, into
# commands on the engine's PostgreSQL wire endpoint (docs/pgwire.md). It is loaded once per backend (the
# generated SQL executes this source and keeps the Bridge in GD), keeps one keep-alive connection per
# backend, reopens it once when a reused connection turns out to be broken, and reports every failure as an
# SQL error with a documented SQLSTATE (docs/sql.md). It never puts data values into messages.
#
# The per-row path is kept lean because it runs once per row: the settings are looked up once per statement and
# reused while unchanged (config), and the HTTP exchange is a few bytes written and read on a raw socket
# (no http.client, no header parsing beyond Content-Length and Connection), with no JSON either way.
#
# The engine address is the options of the foreign server svc_engine (the DBA's). The bridge reads them
# itself, as the owner of the functions, once per statement: the SQL wrapper passes `cfg` = [the statement's
# start time, svc.timeout_ms, svc.batch_size], a simple expression that costs no query per row, and the
# server is looked up again when the statement changes (a new statement sees an ALTER SERVER, as a query
# would). No function takes an address as an argument. The lookup is a plpy.execute, which PL/Python runs in
# a subtransaction: the functions are PARALLEL UNSAFE, so no parallel plan (where subtransactions are
# refused) runs them; for the same reason only a non-worker backend polls for interrupts.
import base64
import json
import re
import select
import socket
import ssl
import struct
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
# Bytes of data per request: large values go in smaller requests so bodies stay well under the engine's limit.
MAX_REQUEST_DATA_BYTES = 2 * 1024 * 1024
# The largest answer read: requests carry at most 2 MiB of data (or one value up to the engine's limit), so
# their answers are far smaller; a bigger Content-Length is not the engine answering this bridge.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
# While waiting for an answer, wake up this often to let PostgreSQL process a cancel or statement_timeout.
INTERRUPT_SLICE_S = 0.05
# Connections per transport and backend: an array of several chunks keeps one chunk in flight on each of
# lanes 0 and 1; lanes 2 and 3 each carry an array svc_array_send sent ahead, so calls in between (a
# trigger's, say) neither disturb nor read their answers.
AHEAD_LANES = (2, 3)
CONNECTIONS = 4
# Values in one request of an array sent ahead: the engine's default batch limit (SVC_BATCH_MAX_ITEMS).
AHEAD_REQUEST_VALUES = 10000
ARRAY_OPS = ('encrypt', 'decrypt', 'rewrap')
NOT_SENT_AHEAD = '55000'  # svc_array_collect without a matching svc_array_send
NOT_ONE_DIMENSIONAL = '2202E'  # array_subscript_error, as the dblink bridge raises it

# The binary frame, version 1 (docs/binary-frame.md); integers big-endian.
MAGIC = b'SVCF'
FRAME_VERSION = 1
FRAME_OPS = {'encrypt': 0x01, 'decrypt': 0x02, 'rewrap': 0x03}  # a result frame's operation is this | 0x80
FRAME_HEADER = struct.Struct('>4sBBHI')  # magic, version, operation, reserved, item count
RESULT_HEADER = struct.Struct('>4sBBHIIII')  # ... and totalSuccess, totalFailed, totalProcessingTime
RESULT_ITEM = struct.Struct('>HHH')  # code, status, policy code length (then the code, data length, data)
ENCRYPT_HEAD = struct.Struct('>BIH')  # policy kind, policy version, reference length (then the reference)
U32 = struct.Struct('>I')
POLICY_CODE = 0x01
POLICY_NAME = 0x02
ITEM_SUCCESS = 1000
FRAME_REQUEST_HEADERS = 'Content-Type: application/x-svc-binary-frame\r\nContent-Length: %d\r\n'

ENGINE_CHECK_HINT = 'Check the engine directly (GET <url of server svc_engine>/api/health and one POST /api/encrypt); if it works there, the problem is between PostgreSQL and the engine.'
# The server's foreign-data wrapper and options (see name_values).
SERVER_LOOKUP = ('SELECT w.fdwname::text AS wrapper, s.srvoptions AS options FROM pg_catalog.pg_foreign_server s '
                 'JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw WHERE s.srvname = $1')
# The options of the user mapping of the functions' owner (the current user inside the SECURITY DEFINER
# wrappers): the tenant id (a credential of the operations API), and the user and password of the wire
# endpoint. pg_user_mappings shows them to that role and superusers only.
MAPPING_LOOKUP = 'SELECT m.umoptions AS options FROM pg_catalog.pg_user_mappings m WHERE m.srvname = $1 AND m.usename = CURRENT_USER'
WIRE_MAPPING_HINT = ("CREATE USER MAPPING FOR <owner of the svc functions> SERVER svc_engine OPTIONS (user 'svc', password '...') "
                     'with SVC_PG_USER / SVC_PG_PASSWORD of the engine; see docs/sql.md.')
WIRE_CHECK_HINT = 'Check that the engine runs with SVC_PG_PORT set and that option wire_url of the server svc_engine points at it.'
# Connection parameters that are credentials: they belong in the owner's user mapping, not in wire_url,
# which every role can read.
WIRE_CREDENTIALS = ('user', 'password', 'sslpassword')
ITEM_DETAIL = re.compile(r'^item ([0-9]+) of [0-9]+$')
# Connection states after which the wire connection is dropped (and a reused one reopened once).
WIRE_BROKEN = ('57P01', '57P02', '57P03', '57P05')


class Unavailable(Exception):
    """The deadline passed while waiting for the engine's answer."""


class LaneRefused(Exception):
    """The second connection of a transport could not be opened."""


class Ahead:
    """An array svc_array_send sent: its arguments, the positions and UTF-8 bytes of its non-NULL values, its
    lane, the settings it was sent with and, when a request went, ((start, end) of the values it carries,
    the pending exchange, its connection)."""
    __slots__ = ('op', 'policy_code', 'values', 'positions', 'data', 'lane', 'settings', 'sent')

    def __init__(self, op, policy_code, values, positions, data, lane):
        self.op = op
        self.policy_code = policy_code
        self.values = values
        self.positions = positions
        self.data = data
        self.lane = lane
        self.settings = None
        self.sent = None


class Settings:
    # ops: the operations API's endpoint (a Settings of its own; this one when the server has no ops_url).
    # wire: the libpq connection string of the engine's wire endpoint (option wire_url), or None for HTTP.
    __slots__ = ('url', 'scheme', 'host', 'port', 'base_path', 'timeout_s', 'timeout_ms', 'batch_size', 'ops', 'wire')


class Bridge:
    def __init__(self, plpy, language='plpython3u'):
        self.plpy = plpy
        self.language = language
        # Executing any statement runs PostgreSQL's interrupt check (cancel, statement_timeout); prepared on
        # first use, and never in a parallel worker, where a worker's wait is bounded by svc.timeout_ms.
        self.tick_plan = None
        self.parallel_worker = in_parallel_worker()
        # Connections of each transport ("lanes", see CONNECTIONS): a call uses lane 0; an array of several
        # chunks keeps one chunk in flight on lanes 0 and 1, so the backend prepares and reads one while the
        # engine works on the other; an array sent ahead waits on lane 2 or 3.
        self.socks = [None] * CONNECTIONS
        self.sock_keys = [None] * CONNECTIONS
        self.tls = None
        self.config_key = None
        self.config_value = None
        self.plans = {}
        self.wire_conns = [None] * CONNECTIONS
        self.wire_keys = [None] * CONNECTIONS
        self.pg_module = None
        # The arrays sent ahead and not yet collected (Ahead), oldest first.
        self.ahead = []

    # ---- settings -------------------------------------------------------------------------------

    def settings(self, cfg):
        """cfg = [statement start, svc.timeout_ms, svc.batch_size]; the address from the server svc_engine's options."""
        _, timeout_ms, batch_size = (list(cfg or []) + [None] * 3)[:3]
        rows = self.plpy.execute(self.plan('server', SERVER_LOOKUP), [SERVER])
        if len(rows) == 0:
            self.fail(CONFIG, 'the foreign server %s that holds the engine address does not exist' % SERVER, hint=SERVER_HINT)
        wrapper = rows[0]['wrapper']
        if wrapper != BRIDGE_FDW:
            # A server of the dblink bridge (dblink_fdw) names a PostgreSQL wire endpoint, not an HTTP one.
            self.fail(CONFIG, 'the foreign server %s is on the foreign-data wrapper %s, not %s' % (SERVER, wrapper, BRIDGE_FDW),
                      hint='Drop it and ' + SERVER_HINT)
        options = name_values(rows[0]['options'])
        url, ops_url, wire = options.get('url'), options.get('ops_url'), options.get('wire_url')
        if url is None or url.strip() == '':
            self.fail(CONFIG, 'the foreign server %s has no option url' % SERVER,
                      hint="ALTER SERVER svc_engine OPTIONS (ADD url 'http://127.0.0.1:8080'); see docs/sql.md.")
        s = self.endpoint(url, 'url')
        s.wire = self.wire_dsn(wire) if wire is not None and wire.strip() != '' else None
        s.timeout_ms = self.integer(timeout_ms, 'svc.timeout_ms', DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
        s.timeout_s = s.timeout_ms / 1000.0
        s.batch_size = self.integer(batch_size, 'svc.batch_size', DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE)
        s.ops = s
        if ops_url is not None and ops_url.strip() != '':
            s.ops = self.endpoint(ops_url, 'ops_url')
            s.ops.timeout_ms, s.ops.timeout_s, s.ops.batch_size = s.timeout_ms, s.timeout_s, s.batch_size
            s.ops.ops, s.ops.wire = s.ops, None
        return s

    def wire_dsn(self, dsn):
        """Option wire_url: a libpq connection string (URI or key=value) without credentials, which belong in
        the owner's user mapping (server options are readable by every role)."""
        psycopg2 = self.psycopg2()
        try:
            params = psycopg2.extensions.parse_dsn(dsn.strip())
        except psycopg2.ProgrammingError:
            self.fail(CONFIG, 'option wire_url of the foreign server %s is not a libpq connection string' % SERVER,
                      hint="ALTER SERVER svc_engine OPTIONS (SET wire_url 'postgresql://127.0.0.1:5433/svc'); see docs/sql.md.")
        if any(name in params for name in WIRE_CREDENTIALS):
            self.fail(CONFIG, 'option wire_url of the foreign server %s must not hold a user or password' % SERVER, hint=WIRE_MAPPING_HINT)
        return dsn.strip()

    def psycopg2(self):
        """The psycopg2 module, imported on first use (only the wire transport needs it)."""
        if self.pg_module is None:
            try:
                import psycopg2
                import psycopg2.extensions
            except ImportError:
                self.fail(CONFIG, 'option wire_url of the foreign server %s needs psycopg2 in the Python of the PostgreSQL server' % SERVER,
                          hint='Install it (Debian and Ubuntu: apt-get install python3-psycopg2), or drop the option wire_url to use url.')
            self.pg_module = psycopg2
        return self.pg_module

    def mapping(self):
        """The options of the owner's user mapping for the server (tenant_id; user and password for the wire)."""
        rows = self.plpy.execute(self.plan('mapping', MAPPING_LOOKUP), [SERVER])
        return name_values(rows[0]['options'] if len(rows) > 0 else None)

    def tenant_id(self):
        return self.mapping().get('tenant_id') or None

    def plan(self, name, query):
        """A statement prepared once per backend."""
        plan = self.plans.get(name)
        if plan is None:
            plan = self.plans[name] = self.plpy.prepare(query, ['text'])
        return plan

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

    def config(self, cfg):
        """settings(cfg), looked up again only in a new statement or when a setting changed (cfg arrives on every call)."""
        key = tuple(cfg) if cfg is not None else None
        if self.config_value is None or key != self.config_key:
            self.config_value = self.settings(cfg)
            self.config_key = key
            # A wire connection to an endpoint the server no longer names is not kept open.
            if any(c is not None for c in self.wire_conns) and self.wire_keys[0] != self.config_value.wire:
                self.wire_close()
        return self.config_value

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
        return self.run_one(cfg, 'encrypt', data, self.policy(POLICY_CODE, policy_code, None))

    def encrypt_by_name(self, cfg, data, policy_name, policy_version):
        return self.run_one(cfg, 'encrypt', data, self.policy(POLICY_NAME, policy_name, policy_version))

    def decrypt(self, cfg, data):
        return self.run_one(cfg, 'decrypt', data, None)

    def encrypt_array(self, cfg, values, policy_code):
        return self.run_array(cfg, 'encrypt', values, self.policy(POLICY_CODE, policy_code, None))

    def decrypt_array(self, cfg, values):
        return self.run_array(cfg, 'decrypt', values, None)

    def policy(self, kind, reference, version):
        """An encrypt call's policy (kind, reference, version), the same for every value of the call."""
        # The frame says "no version" with 0 and the wire with "-"; JSON let the engine refuse these.
        if version is not None and not 1 <= version <= 0xFFFFFFFF:
            self.fail(ITEM_FAILED, 'svc_encrypt: policyVersion must be a positive integer')
        return (kind, reference or '', version)

    def rewrap(self, cfg, data):
        # A rewrap item has a decrypt item's layout: the ciphertext alone (docs/binary-frame.md).
        return self.run_one(cfg, 'rewrap', data, None)

    def rewrap_array(self, cfg, values):
        return self.run_array(cfg, 'rewrap', values, None)

    def equality_terms(self, cfg, data, policy_code):
        s = self.config(cfg)
        if s.wire is not None:
            rows = self.wire_query(s, 'svc_equality_terms', 'svc_equality_terms %s %s' % (b64(policy_code.encode('utf-8')), b64(data.encode('utf-8'))))
            return [row[1] for row in rows]
        path = '/api/equality-terms'
        answer = self.post_json(s, 'equality_terms', path, {'data': data, 'policyCode': policy_code})
        terms = answer.get('terms')
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s without terms' % (s.url, path), hint=ENGINE_CHECK_HINT)
        return terms

    def health(self, cfg):
        s = self.config(cfg)
        if s.wire is not None:
            status, service, version = self.wire_query(s, 'svc_health', 'svc_health')[0]
            return json.dumps({'status': status, 'service': service, 'version': version})
        status, body = self.exchange(s, 'GET', '/api/health', None, '')
        if status != 200:
            self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d to GET /api/health' % (s.url, status), hint=ENGINE_CHECK_HINT)
        return body.decode('utf-8')

    def engine_info(self, cfg):
        s = self.config(cfg)
        info = {
            'engineServer': SERVER,
            'engineUrl': s.url,
            'opsUrl': s.ops.url,
            'wireUrl': s.wire,
            'bridge': self.language,
            'timeoutMs': s.timeout_ms,
            'batchSize': s.batch_size,
            'health': json.loads(self.health(cfg)),
        }
        # The operations API may have its own listener (the server's ops_url); the tenant id is its credential.
        tenant_id = self.tenant_id()
        headers = 'X-SVC-Tenant-Id: %s\r\n' % tenant_id if tenant_id else ''
        status, body = self.exchange(s.ops, 'GET', '/engine/api/v1/runtime/info', None, headers)
        if status == 200:
            info['runtime'] = json.loads(body)
        else:
            info['runtime'] = None
            info['runtimeStatus'] = status
        return json.dumps(info)

    # ---- batching ---------------------------------------------------------------------------------
    # Over HTTP, every call, one row or an array, is a binary frame (docs/binary-frame.md): items are the UTF-8
    # bytes of the values behind the encrypt item's policy fields (none for decrypt and rewrap), results are
    # read with struct, and no JSON is built or parsed on the way. Over the wire endpoint, a row is one
    # command and an array chunk one *_many command (docs/pgwire.md), the values in base64.

    def run_one(self, cfg, op, value, policy):
        s = self.config(cfg)
        data = value.encode('utf-8')
        if s.wire is not None:
            return self.wire_batch(s, op, policy, [data], 0, 1, False)[0]
        return self.post_batch(s, op, self.policy_head(policy), [data], 0, 1)[0]

    def run_array(self, cfg, op, values, policy):
        if values is None:
            return None
        out, positions, data = self.array_values('svc_' + op, values)
        if not data:
            return out
        s = self.config(cfg)
        send, finish = self.transport(s, op, policy, data)
        self.run_chunks(send, finish, self.chunks(data, 0, s.batch_size), out, positions)
        return out

    def array_send(self, cfg, op, values, policy_code):
        """svc_array_send: the non-NULL values in one request on an ahead lane of their own, sent without
        waiting (what does not fit in one request is left for array_collect). Two arrays can be ahead at once;
        a third send discards the oldest. Returns the number of non-NULL values."""
        policy = self.ahead_policy('svc_array_send', op, policy_code)
        _, positions, data = self.array_values('svc_array_send', values)
        if len(self.ahead) == len(AHEAD_LANES):
            # The oldest answer may still be on its way: its connection is not reused.
            self.drop_ahead(self.ahead.pop(0))
        busy = [a.lane for a in self.ahead]
        ahead = Ahead(op, policy_code, values, positions, data, [lane for lane in AHEAD_LANES if lane not in busy][0])
        if data:
            s = ahead.settings = self.config(cfg)
            send, _ = self.transport(s, op, policy, data)
            chunk = self.chunks(data, 0, AHEAD_REQUEST_VALUES)[0]
            pending = self.open_lane(send, ahead.lane, chunk)
            if pending is not None:
                ahead.sent = (chunk, pending, self.lane_connection(s, ahead.lane))
        self.ahead.append(ahead)
        return len(data)

    def array_collect(self, cfg, op, values, policy_code):
        """svc_array_collect: the results of the array array_send sent with the same arguments."""
        policy = self.ahead_policy('svc_array_collect', op, policy_code)
        ahead = next((a for a in self.ahead if a.op == op and a.policy_code == policy_code and a.values == values), None)
        if ahead is None:
            self.fail(NOT_SENT_AHEAD, 'svc_array_collect: this session has no array sent ahead with these arguments',
                      hint='Call svc_array_send with the same arguments first.')
        self.ahead.remove(ahead)
        # The values are the ones sent: their positions and bytes were worked out then.
        positions, data = ahead.positions, ahead.data
        out = list(values) if values is not None else None
        if not data:
            return out
        s = ahead.settings
        send, finish = self.transport(s, op, policy, data)
        rest = 0
        if ahead.sent is not None:
            chunk, pending, connection = ahead.sent
            try:
                if self.lane_connection(s, ahead.lane) is not connection:
                    # A failure elsewhere closed the connection since: the answer is lost, the values are here.
                    pending = send(ahead.lane, chunk)
                # The wait counts from now: the caller's own work since the send is not the engine's delay.
                pending[1] = time.monotonic() + s.timeout_s
                if pending[-1] is False:
                    # The values are here: an answer lost to a connection that broke meanwhile is asked for
                    # again once, as on a reused connection.
                    pending[-1] = True
                for i, value in zip(positions[chunk[0]:chunk[1]], finish(ahead.lane, chunk, pending)):
                    out[i] = value
            except BaseException:
                self.drop_ahead(ahead)
                raise
            rest = chunk[1]
        if rest < len(data):
            self.run_chunks(send, finish, self.chunks(data, rest, s.batch_size), out, positions)
        return out

    def drop_ahead(self, ahead):
        self.close(ahead.lane)
        self.wire_close(ahead.lane)

    def array_values(self, name, values):
        """(a copy of values to place results in, the positions of its non-NULL values, their UTF-8 bytes).
        PL/Python passes a multi-dimensional array as nested lists."""
        if values is None:
            return None, [], []
        out = list(values)
        positions = [i for i, v in enumerate(out) if v is not None]
        if any(isinstance(out[i], list) for i in positions):
            self.fail(NOT_ONE_DIMENSIONAL, '%s: only one-dimensional arrays are supported' % name)
        return out, positions, [out[i].encode('utf-8') for i in positions]

    def ahead_policy(self, name, op, policy_code):
        """The policy of an array sent ahead (None for decrypt and rewrap), or 22023 for arguments that do not fit."""
        if op not in ARRAY_OPS:
            self.fail('22023', "%s: op must be 'encrypt', 'decrypt' or 'rewrap'" % name)
        if op == 'encrypt':
            if policy_code is None:
                self.fail('22023', '%s: encrypt needs a policy code' % name)
            return self.policy(POLICY_CODE, policy_code, None)
        if policy_code is not None:
            self.fail('22023', '%s: %s takes no policy code' % (name, op))
        return None

    def lane_connection(self, s, lane):
        return self.socks[lane] if s.wire is None else self.wire_conns[lane]

    def chunks(self, data, start, limit):
        """(start, end) ranges of data from `start`: a request closes at `limit` values or at the byte budget
        (one oversized value goes alone)."""
        chunks = []
        total = len(data)
        while start < total:
            end = start
            size = 0
            while end < total and end - start < limit:
                n = len(data[end])
                if end > start and size + n > MAX_REQUEST_DATA_BYTES:
                    break
                size += n
                end += 1
            chunks.append((start, end))
            start = end
        return chunks

    def transport(self, s, op, policy, data):
        """send(lane, chunk) -> pending and finish(lane, chunk, pending) -> result texts, for chunks of `data`
        over the server's transport; errors name items over the whole of `data`."""
        total = len(data)
        if s.wire is not None:
            send = lambda lane, c: self.wire_send(s, lane, self.wire_command(op, policy, data[c[0]:c[1]], True))
            finish = lambda lane, c, pending: self.wire_results(s, op, data[c[0]:c[1]], self.wire_finish(s, lane, 'svc_' + op, pending, c[0], total), True)
        else:
            head = self.policy_head(policy)
            send = lambda lane, c: self.http_send(s, lane, self.frame_request(s, op, head, data[c[0]:c[1]]))
            finish = lambda lane, c, pending: self.frame_results(s, op, c[1] - c[0], self.http_finish(s, lane, pending), c[0], total)
        return send, finish

    def run_chunks(self, send, finish, chunks, out, positions):
        """The chunks over lanes 0 and 1, their results placed in `out` at `positions`."""
        # One chunk in flight on each lane: chunk k goes on lane k % lanes, and is sent when chunk k - lanes
        # has been read. Any failure closes every lane, so no answer still on its way is read as another call's.
        lanes = 1
        pending = [send(0, chunks[0])]
        try:
            if len(chunks) > 1:
                second = self.open_lane(send, 1, chunks[1])
                if second is not None:
                    lanes = 2
                    pending.append(second)
            for k, chunk in enumerate(chunks):
                lane = k % lanes
                results = finish(lane, chunk, pending[k])
                if k + lanes < len(chunks):
                    pending.append(send(lane, chunks[k + lanes]))
                for i, value in zip(positions[chunk[0]:chunk[1]], results):
                    out[i] = value
        except BaseException:
            if lanes > 1:
                # The other lane's chunk may still be on its way.
                self.close()
                self.wire_close()
            raise

    def open_lane(self, send, lane, chunk):
        """`chunk` sent on `lane`; None when that connection cannot be opened (the engine's connection limit,
        say): the array then goes on over the lanes already open."""
        try:
            return send(lane, chunk)
        except LaneRefused:
            return None

    def policy_head(self, policy):
        """The fields before an encrypt item's data length in a frame (none for decrypt and rewrap)."""
        if policy is None:
            return b''
        kind, reference, version = policy
        ref = reference.encode('utf-8')
        if len(ref) > 0xFFFF:
            self.fail(ITEM_FAILED, 'svc_encrypt: the policy reference is longer than 65535 bytes')
        return ENCRYPT_HEAD.pack(kind, version or 0, len(ref)) + ref

    def post_batch(self, s, op, head, data, offset, total):
        """One frame of len(data) items of operation `op`; returns the result texts in order or fails."""
        request = self.frame_request(s, op, head, data)
        return self.frame_results(s, op, len(data), self.http_finish(s, 0, self.http_send(s, 0, request)), offset, total)

    def frame_request(self, s, op, head, data):
        """The HTTP request of one frame of len(data) items of operation `op`."""
        count = len(data)
        parts = [FRAME_HEADER.pack(MAGIC, FRAME_VERSION, FRAME_OPS[op], 0, count)]
        if count == 1:
            parts += (head, U32.pack(len(data[0])), data[0])
        else:
            for d in data:
                parts += (head, U32.pack(len(d)), d)
        body = b''.join(parts)
        return self.request(s, 'POST', '/api/%s/batch' % op, body, FRAME_REQUEST_HEADERS % len(body))

    def frame_results(self, s, op, count, answer, offset, total):
        """The result texts of a frame's answer (status, body), in order, or the SQL error it stands for."""
        status, raw = answer
        path = '/api/%s/batch' % op
        self.check_status(s, op, path, status, raw)
        try:
            return self.read_results(s, op, raw, count, offset, total)
        except (struct.error, ValueError, IndexError):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s with a body that is not a result frame for %d items' % (s.url, path, count),
                      hint=ENGINE_CHECK_HINT)

    def post_json(self, s, op, path, payload):
        """POST a JSON body (the calls without a frame form, such as equality terms); the answer object."""
        body = json.dumps(payload, ensure_ascii=False).encode('utf-8')
        status, raw = self.exchange(s, 'POST', path, body, 'Content-Type: application/json\r\nContent-Length: %d\r\n' % len(body))
        self.check_status(s, op, path, status, raw)
        answer = self.parse(raw)
        if not isinstance(answer, dict):
            self.fail(UNAVAILABLE, 'engine at %s answered POST %s with a body that is not JSON' % (s.url, path), hint=ENGINE_CHECK_HINT)
        return answer

    def check_status(self, s, op, path, status, raw):
        """Anything but 200 as the SQL error it stands for."""
        if status == 200:
            return
        answer = self.parse(raw)
        message = answer.get('error') if isinstance(answer, dict) else None
        # {"success": false, ...} bodies and 413 are the engine refusing the data; anything else is the engine's state.
        if 400 <= status < 500 and (isinstance(answer, dict) and 'success' in answer or status == 413):
            self.fail(ITEM_FAILED, 'svc_%s: %s' % (op, message or 'HTTP %d' % status))
        self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d to POST %s%s' % (s.url, status, path, ': ' + message if message else ''),
                  hint=ENGINE_CHECK_HINT)

    def read_results(self, s, op, raw, count, offset, total):
        magic, version, operation, _, n, _, _, _ = RESULT_HEADER.unpack_from(raw, 0)
        if magic != MAGIC or version != FRAME_VERSION or operation != FRAME_OPS[op] | 0x80 or n != count:
            raise ValueError('not the expected result frame')
        out = []
        append = out.append
        item = RESULT_ITEM.unpack_from
        length = U32.unpack_from
        size = len(raw)
        o = RESULT_HEADER.size
        for index in range(count):
            code, _, p = item(raw, o)
            o += 6 + p
            d, = length(raw, o)
            o += 4
            if o + d > size:
                raise ValueError('item runs past the end')
            if code == ITEM_SUCCESS:
                try:
                    append(raw[o:o + d].decode('utf-8'))
                    o += d
                    continue
                except UnicodeDecodeError:
                    # Plaintext another client encrypted as raw bytes: a text result cannot carry it.
                    message = 'decrypted data is not valid UTF-8'
            else:
                message = raw[o:o + d].decode('utf-8', 'replace') or 'item failed'
            detail = 'item %d of %d' % (offset + index + 1, total) if total > 1 else None
            self.fail(ITEM_FAILED, 'svc_%s: %s' % (op, message), detail=detail)
        if o != size:
            raise ValueError('trailing bytes')
        return out

    def parse(self, raw):
        try:
            return json.loads(raw)
        except ValueError:
            return None

    # ---- HTTP ---------------------------------------------------------------------------------------
    # A minimal HTTP/1.1 client on the backend's socket: one request written at once, the status line
    # and headers read up to MAX_HEADER_BYTES, then exactly Content-Length body bytes. Only Content-Length,
    # Connection and Transfer-Encoding are looked at; the engine always answers with a length, so a chunked
    # or length-less answer is refused rather than read. https:// wraps the same socket in ssl (the default
    # context: certificate and host name verified).

    def exchange(self, s, method, path, body, headers):
        """One request on the backend's keep-alive connection (lane 0): (status, body)."""
        return self.http_finish(s, 0, self.http_send(s, 0, self.request(s, method, path, body, headers)))

    def request(self, s, method, path, body, headers):
        host = '[%s]' % s.host if ':' in s.host else s.host
        if s.port != (443 if s.scheme == 'https' else 80):
            host += ':%d' % s.port
        request = ('%s %s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n' % (method, s.base_path, path, host, headers)).encode('latin-1')
        return request + body if body is not None else request

    def http_send(self, s, lane, request):
        """Writes `request` on the lane's connection (opened if needed); the pending exchange for http_finish:
        [request, deadline, whether the connection was reused, or None when it is still to be sent]."""
        deadline = time.monotonic() + s.timeout_s
        key = (s.scheme, s.host, s.port)
        reused = self.socks[lane] is not None and self.sock_keys[lane] == key
        try:
            self.send_all(self.connection(s, lane, key, deadline), request, deadline)
            return [request, deadline, reused]
        except Unavailable:
            self.close()
            self.timed_out(s)
        except OSError as e:
            if reused and not is_timeout(e):
                # A reused connection that broke while idle: http_finish sends again on a new one.
                self.close(lane)
                return [request, deadline, None]
            if lane > 0 and self.socks[lane] is None:
                raise LaneRefused()
            self.http_failed(s, e)
        except BaseException:
            self.close()
            raise

    def http_finish(self, s, lane, pending):
        """The answer (status, body) to a request http_send wrote; a broken reused connection is reopened and
        the request sent again, once."""
        request, deadline, reused = pending
        for attempt in (0, 1):
            try:
                if reused is None:
                    reused = False
                    self.send_all(self.connection(s, lane, (s.scheme, s.host, s.port), deadline), request, deadline)
                return self.read_response(s, lane, deadline)
            except Unavailable:
                self.close()
                self.timed_out(s)
            except OSError as e:
                if reused and attempt == 0 and not is_timeout(e) and time.monotonic() < deadline:
                    self.close(lane)
                    reused = None
                    continue
                self.http_failed(s, e)
            except BaseException:
                # A cancel or statement_timeout (raised by the interrupt check), or an answer refused below,
                # leaves the connections in an unknown state.
                self.close()
                raise
        raise AssertionError('unreachable')

    def http_failed(self, s, error):
        self.close()
        if is_timeout(error):
            self.timed_out(s)
        self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.url, describe(error)), hint=ENGINE_CHECK_HINT)

    def read_response(self, s, lane, deadline):
        sock = self.socks[lane]
        buf = b''
        while True:
            end = buf.find(b'\r\n\r\n')
            if end >= 0:
                break
            if len(buf) > MAX_HEADER_BYTES:
                self.fail(UNAVAILABLE, 'engine at %s answered with more than %d bytes of HTTP headers' % (s.url, MAX_HEADER_BYTES), hint=ENGINE_CHECK_HINT)
            buf += self.receive(sock, deadline, 65536)
        # Header names are case-insensitive: the block is lower-cased once and searched for the three that matter.
        head = buf[:end].lower() + b'\r\n'
        first = head.find(b'\r\n')
        version, _, rest = head[:first].partition(b' ')
        code = rest[:3]
        if not version.startswith(b'http/1.') or not code.isdigit():
            self.fail(UNAVAILABLE, 'engine at %s answered something that is not HTTP/1.1' % s.url, hint=ENGINE_CHECK_HINT)
        status = int(code)
        value = header(head, b'transfer-encoding')
        if value is not None and value != b'identity':
            self.fail(UNAVAILABLE, 'engine at %s answered with Transfer-Encoding: %s; the bridge reads only answers with a Content-Length'
                      % (s.url, value.decode('latin-1')), hint=ENGINE_CHECK_HINT)
        value = header(head, b'content-length')
        length = None
        if value is not None:
            if not value.isdigit() or head.count(b'\r\ncontent-length:') > 1:
                self.fail(UNAVAILABLE, 'engine at %s answered an invalid Content-Length' % s.url, hint=ENGINE_CHECK_HINT)
            length = int(value)
        value = header(head, b'connection')
        tokens = [t.strip() for t in value.split(b',')] if value is not None else []
        close = b'close' in tokens or version == b'http/1.0' and b'keep-alive' not in tokens
        if length is None:
            if status in (204, 304) or 100 <= status < 200:
                length = 0
            else:
                self.fail(UNAVAILABLE, 'engine at %s answered HTTP %d without a Content-Length' % (s.url, status), hint=ENGINE_CHECK_HINT)
        if length > MAX_RESPONSE_BYTES:
            self.fail(UNAVAILABLE, 'engine at %s answered %d bytes, more than the %d the bridge accepts' % (s.url, length, MAX_RESPONSE_BYTES),
                      hint=ENGINE_CHECK_HINT)
        body = buf[end + 4:]
        if len(body) < length:
            # The rest of a large body goes straight into its final buffer.
            whole = bytearray(length)
            whole[:len(body)] = body
            view = memoryview(whole)
            got = len(body)
            while got < length:
                n = self.receive_into(sock, deadline, view[got:])
                got += n
            body = bytes(whole)
        elif len(body) > length:
            # Nothing is pipelined, so bytes after the answer mean the connection cannot be trusted.
            close = True
            body = body[:length]
        if close:
            self.close(lane)
        return status, body

    def timed_out(self, s):
        self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.url, s.timeout_ms), hint=ENGINE_CHECK_HINT)

    # The socket is non-blocking once open: a call is one send, one wait and one receive, where a socket with a
    # timeout would add a poll before each and a change of timeout per call.

    def send_all(self, sock, data, deadline):
        view = memoryview(data)
        while view:
            try:
                view = view[sock.send(view):]
            except (BlockingIOError, ssl.SSLWantWriteError):
                self.wait_for(sock, deadline, True)
            except ssl.SSLWantReadError:
                self.wait_for(sock, deadline, False)

    def receive(self, sock, deadline, size):
        return self.read(sock, deadline, sock.recv, size)

    def receive_into(self, sock, deadline, view):
        return self.read(sock, deadline, sock.recv_into, view)

    def read(self, sock, deadline, call, arg):
        """call(arg) once the socket has something to read: the bytes (or their count) it read."""
        self.wait_readable(sock, deadline)
        while True:
            try:
                got = call(arg)
            except (BlockingIOError, ssl.SSLWantReadError):
                self.wait_for(sock, deadline, False)
                continue
            except ssl.SSLWantWriteError:
                self.wait_for(sock, deadline, True)
                continue
            if not got:
                raise ConnectionResetError('the engine closed the connection')
            return got

    def connection(self, s, lane, key, deadline):
        if self.socks[lane] is not None and self.sock_keys[lane] == key:
            return self.socks[lane]
        self.close(lane)
        timeout = max(deadline - time.monotonic(), 0.001)
        sock = socket.create_connection((s.host, s.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if s.scheme == 'https':
                if self.tls is None:
                    self.tls = ssl.create_default_context()
                sock = self.tls.wrap_socket(sock, server_hostname=s.host)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.socks[lane] = sock
        self.sock_keys[lane] = key
        return sock

    def wait_readable(self, sock, deadline):
        # Bytes ssl has already decrypted are invisible to select.
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return
        self.wait_for(sock, deadline, False)

    def wait_for(self, fd, deadline, write):
        """Until `fd` is readable (writable), polling for interrupts; Unavailable once the deadline passed."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Unavailable()
            readable, writable, _ = select.select([] if write else [fd], [fd] if write else [], [], min(remaining, INTERRUPT_SLICE_S))
            if readable or writable:
                return
            if not self.parallel_worker:
                if self.tick_plan is None:
                    self.tick_plan = self.plpy.prepare('SELECT 1')
                self.plpy.execute(self.tick_plan)

    def close(self, lane=None):
        """Closes the HTTP connection of `lane`, or of every lane."""
        drop(self.socks, self.sock_keys, lane)

    # ---- the wire endpoint ------------------------------------------------------------------------------
    # With option wire_url, the calls go to the engine's PostgreSQL wire endpoint (docs/pgwire.md) through
    # psycopg2, that is libpq with its SCRAM, TLS and protocol code: an engine command costs the engine about
    # half the CPU of an HTTP request. One connection per backend, in asynchronous mode, so the wait keeps
    # svc.timeout_ms and PostgreSQL's interrupt checks; the user and password come from the owner's user
    # mapping when it opens and are not kept.

    def wire_batch(self, s, op, policy, data, offset, total, many):
        """One command for `data` (UTF-8 values): svc_<op>[_many][_by_name]; the result texts in order."""
        rows = self.wire_query(s, 'svc_' + op, self.wire_command(op, policy, data, many), offset, total)
        return self.wire_results(s, op, data, rows, many)

    def wire_command(self, op, policy, data, many):
        command = 'svc_%s%s' % (op, '_many' if many else '')
        if policy is not None:
            kind, reference, version = policy
            ref = b64(reference.encode('utf-8'))
            command = '%s_by_name %s %s' % (command, ref, version or '-') if kind == POLICY_NAME else '%s %s' % (command, ref)
        return ' '.join([command] + [b64(d) for d in data])

    def wire_results(self, s, op, data, rows, many):
        name = 'svc_%s%s' % (op, '_many' if many else '')
        if many:
            if len(rows) != len(data) or any(row[0] != k + 1 for k, row in enumerate(rows)):
                self.fail(UNAVAILABLE, 'engine at %s answered %d rows to %s of %d values' % (s.wire, len(rows), name, len(data)), hint=WIRE_CHECK_HINT)
            return [row[1] for row in rows]
        if len(rows) != 1 or len(rows[0]) != 1:
            self.fail(UNAVAILABLE, 'engine at %s answered %d rows to %s' % (s.wire, len(rows), name), hint=WIRE_CHECK_HINT)
        return [rows[0][0]]

    def wire_query(self, s, op, command, offset=0, total=1):
        """The rows answering one command on lane 0."""
        return self.wire_finish(s, 0, op, self.wire_send(s, 0, command), offset, total)

    def wire_send(self, s, lane, command):
        """Sends `command` on the lane's connection (opened if needed); the pending command for wire_finish:
        [command, deadline, cursor or None when it is still to be sent, whether the connection was reused]."""
        pg = self.psycopg2()
        deadline = time.monotonic() + s.timeout_s
        reused = self.wire_conns[lane] is not None and self.wire_keys[lane] == s.wire
        try:
            cursor = self.wire_connection(s, lane, deadline).cursor()
            cursor.execute(command)
            return [command, deadline, cursor, reused]
        except pg.Error as e:
            if reused and wire_broken(e):
                # A reused connection that broke while idle: wire_finish sends again on a new one.
                self.wire_close(lane)
                return [command, deadline, None, False]
            if lane > 0 and self.wire_conns[lane] is None:
                raise LaneRefused()
            self.wire_close()
            self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.wire, first_line(e)), hint=WIRE_CHECK_HINT)
        except Unavailable:
            self.wire_close()
            self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.wire, s.timeout_ms), hint=WIRE_CHECK_HINT)
        except BaseException:
            self.wire_close()
            raise

    def wire_finish(self, s, lane, op, pending, offset, total):
        """The rows answering a command wire_send sent; a broken reused connection is reopened and the command
        sent again, once."""
        pg = self.psycopg2()
        command, deadline, cursor, reused = pending
        for attempt in (0, 1):
            try:
                if cursor is None:
                    cursor = self.wire_connection(s, lane, deadline).cursor()
                    cursor.execute(command)
                self.wire_wait(self.wire_conns[lane], deadline)
                return cursor.fetchall()
            except Unavailable:
                self.wire_close()
                self.fail(UNAVAILABLE, 'engine at %s did not answer within svc.timeout_ms (%d ms)' % (s.wire, s.timeout_ms), hint=WIRE_CHECK_HINT)
            except pg.Error as e:
                if wire_broken(e):
                    self.wire_close(lane)
                    if reused and attempt == 0 and time.monotonic() < deadline:
                        cursor, reused = None, False
                        continue
                    self.wire_close()
                    self.fail(UNAVAILABLE, 'engine at %s is unreachable: %s' % (s.wire, first_line(e)), hint=WIRE_CHECK_HINT)
                self.wire_failed(s, op, e, offset, total)
            except BaseException:
                # A cancel or statement_timeout (raised by the interrupt check) leaves the command unanswered.
                self.wire_close()
                raise
        raise AssertionError('unreachable')

    def wire_failed(self, s, op, error, offset, total):
        """An engine error as the SQL error it stands for; "item i of n" counted over the whole array."""
        message = error.diag.message_primary or first_line(error)
        detail = error.diag.message_detail
        if error.pgcode == ITEM_FAILED:
            item = ITEM_DETAIL.match(detail or '')
            if item:
                detail = 'item %d of %d' % (offset + int(item.group(1)), total)
            elif total > 1:
                detail = 'item %d of %d' % (offset + 1, total)
            self.fail(ITEM_FAILED, message, detail=detail)
        if error.pgcode == UNAVAILABLE:
            self.fail(UNAVAILABLE, message, detail=detail, hint=ENGINE_CHECK_HINT)
        self.fail(UNAVAILABLE, 'engine at %s answered %s to %s: %s' % (s.wire, error.pgcode, op, message), hint=WIRE_CHECK_HINT)

    def wire_connection(self, s, lane, deadline):
        if self.wire_conns[lane] is not None and self.wire_keys[lane] == s.wire:
            return self.wire_conns[lane]
        self.wire_close(lane)
        pg = self.psycopg2()
        mapping = self.mapping()
        if not mapping.get('user') or not mapping.get('password'):
            self.fail(CONFIG, 'option wire_url of the foreign server %s needs a user and password in the user mapping of the owner of the svc functions'
                      % SERVER, hint=WIRE_MAPPING_HINT)
        try:
            conn = self.wire_conns[lane] = pg.connect(s.wire, user=mapping['user'], password=mapping['password'],
                                                      application_name='svc_bridge', async_=True)
            self.wire_keys[lane] = s.wire
            self.wire_wait(conn, deadline)
        except pg.OperationalError as e:
            self.wire_close(lane)
            text = str(e)
            if 'password authentication failed' in text or 'no password supplied' in text:
                self.fail(CONFIG, 'the engine refused the credentials of the user mapping for server %s' % SERVER,
                          detail=text[text.find('password authentication failed'):].split('\n', 1)[0].strip() or None, hint=WIRE_MAPPING_HINT)
            raise
        return self.wire_conns[lane]

    def wire_wait(self, conn, deadline):
        """Until psycopg2 has finished the connection's current step (POLL_OK is 0, POLL_WRITE 2)."""
        while True:
            state = conn.poll()
            if state == 0:
                return
            self.wait_for(conn.fileno(), deadline, state == 2)

    def wire_close(self, lane=None):
        """Closes the wire connection of `lane`, or of every lane."""
        drop(self.wire_conns, self.wire_keys, lane)

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


def header(head, name):
    """The stripped value of header `name` in a lower-cased header block ending in CRLF, or None."""
    start = head.find(b'\r\n' + name + b':')
    if start < 0:
        return None
    start += len(name) + 3
    return head[start:head.find(b'\r\n', start)].strip()


def name_values(options):
    """A server's or user mapping's options (name=value strings, split as pg_options_to_table splits them)."""
    return dict(o.split('=', 1) for o in options or [] if '=' in o)


def b64(data):
    """A text argument of a wire command: standard base64 of the UTF-8 bytes, "-" for the empty string."""
    return base64.b64encode(data).decode('ascii') if data else '-'


def drop(conns, keys, lane):
    """Closes the connection of `lane` in `conns` (sockets or psycopg2 connections), or every one."""
    for k in range(len(conns)) if lane is None else (lane,):
        if conns[k] is not None:
            try:
                conns[k].close()
            except Exception:
                pass
        conns[k] = None
        keys[k] = None


def is_timeout(error):
    return isinstance(error, TimeoutError) or 'timed out' in str(error)


def wire_broken(error):
    """A psycopg2 error that leaves the connection unusable (no SQLSTATE, class 08, or the engine going away)."""
    code = error.pgcode
    return code is None or code.startswith('08') or code in WIRE_BROKEN


def first_line(error):
    text = str(error).strip()
    return text.split('\n', 1)[0].strip() or error.__class__.__name__


def describe(error):
    text = str(error) or error.__class__.__name__
    return text.split('] ', 1)[-1] if text.startswith('[Errno') else text
