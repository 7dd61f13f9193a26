// Which addresses an operator-supplied URL (the stats connection test) may make the engine call.
// Link-local and cloud metadata addresses are refused by default, checked on the addresses a name
// resolves to; the caller then connects to exactly those addresses (no second resolution a DNS
// rebinding could change). A configured allow list replaces the default rule.
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

export interface ResolvedAddress {
  readonly address: string;
  readonly family: 4 | 6;
}

export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (hostname) =>
  (await lookup(hostname, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

const REFUSED = new BlockList();
REFUSED.addSubnet('169.254.0.0', 16, 'ipv4'); // link-local, cloud metadata (169.254.169.254, 169.254.170.2)
REFUSED.addSubnet('fe80::', 10, 'ipv6'); // link-local
REFUSED.addAddress('fd00:ec2::254', 'ipv6'); // AWS metadata over IPv6
REFUSED.addAddress('100.100.100.200', 'ipv4'); // Alibaba Cloud metadata
REFUSED.addSubnet('0.0.0.0', 8, 'ipv4'); // "this host": connecting to it reaches the engine's own host
REFUSED.addAddress('::', 'ipv6');

/** Host names of metadata services, refused before any resolution. */
const METADATA_NAMES = new Set(['metadata', 'metadata.google.internal', 'metadata.goog', 'instance-data', 'instance-data.ec2.internal']);

/** The IPv4 address inside an IPv4-mapped IPv6 address (::ffff:a.b.c.d or ::ffff:xxxx:xxxx). */
function mappedIpv4(address: string): string | undefined {
  const match = /^::ffff:(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/i.exec(address);
  if (!match) return undefined;
  if (match[1]) return match[1];
  const high = Number.parseInt(match[2] ?? '0', 16);
  const low = Number.parseInt(match[3] ?? '0', 16);
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
}

export function isRefusedAddress(address: string): boolean {
  const v4 = mappedIpv4(address);
  if (v4) return REFUSED.check(v4, 'ipv4');
  return REFUSED.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
}

/** The URL's host without IPv6 brackets or a trailing dot, lower-cased. */
export function bareHost(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase();
}

function defaultPort(url: URL): string {
  return url.port || (url.protocol === 'https:' ? '443' : '80');
}

/** Whether `host` or `host:port` entries of an allow list name this URL's target. */
export function isListed(url: URL, allowed: readonly string[]): boolean {
  const host = bareHost(url);
  const port = defaultPort(url);
  return allowed.some((entry) => {
    // The entry's own port, even the protocol's default (which URL would drop); none: any port.
    const entryPort = /\]?:(\d+)$/.exec(entry)?.[1];
    return bareHost(new URL(`http://${entry}`)) === host && (entryPort === undefined || Number(entryPort) === Number(port));
  });
}

/**
 * The addresses to connect to for this URL, or undefined when the target is refused: not on the
 * allow list when there is one, otherwise a metadata name or any resolved address in a refused range.
 */
export async function vetTarget(
  url: URL,
  allowed: readonly string[] | undefined,
  resolve: Resolver,
): Promise<ResolvedAddress[] | undefined> {
  const host = bareHost(url);
  if (allowed && !isListed(url, allowed)) return undefined;
  if (!allowed && METADATA_NAMES.has(host)) return undefined;
  const family = isIP(host);
  const addresses = family ? [{ address: host, family: family === 6 ? (6 as const) : (4 as const) }] : await resolve(host);
  if (!allowed && addresses.some((a) => isRefusedAddress(a.address))) return undefined;
  return addresses;
}
