// Package egress is the host-side HTTP forward proxy through which a sandbox whose policy
// says network.default: deny reaches the hosts its policy allows, and nothing else. The
// sandbox has a network namespace with loopback only; its only way out is this proxy, on
// 127.0.0.1:3128 inside it, where HTTP_PROXY and HTTPS_PROXY point: the control plane
// listens there itself under runc (in the namespace it made for the sandbox), and the
// sandbox's agent relays the port over its channel under runsc and in a microVM. The proxy is a library: [Proxy.ServeSandbox] serves one
// sandbox on any net.Listener, and the listener a connection arrived on is the only thing
// that says which sandbox it came from.
//
// It speaks two forms of HTTP/1.1 proxying: CONNECT host:port (HTTPS, and anything else
// tunnelled) and plain HTTP forward requests in absolute form (GET http://host/path).
// By default CONNECT is allowed only to port 443 and plain HTTP only to port 80
// ([Options.ConnectPorts], [Options.HTTPPorts]).
//
// # Threat model
//
// The sandbox is hostile and knows how proxies have been bypassed before: by a host name
// that one parser reads one way and another reads another way (a NUL byte, user@host,
// percent-encoding, a zone ID, 127.1, a trailing dot), by an allowed name whose DNS
// answer is 127.0.0.1 or 169.254.169.254 (DNS rebinding), by asking for one host in
// CONNECT and another in the TLS ClientHello or the Host header (domain fronting), by
// plain HTTP where only CONNECT was checked, and by exhausting the host with connections
// or endless headers. In order, for every request:
//
//  1. The request must be well-formed. The authority (CONNECT's target, the absolute
//     URI's host and port, the Host header) is parsed strictly, and anything that is not
//     a plain host name, a dotted-quad IPv4 address or a bracketed IPv6 address is
//     refused with 400 and the reason: control characters, spaces, NUL, '%' (escapes,
//     zone IDs), '@' (user information), non-ASCII (send the xn-- form), empty or
//     over-long labels, names over 253 bytes, a trailing dot, numeric forms a resolver
//     would read as an address (127.1, 0x7f.1, 2130706433), a missing, zero or
//     non-canonical port. Names are lower-cased and addresses written canonically
//     (IPv4-mapped IPv6 unmapped); nothing else is rewritten. The Host header, when the
//     request has one, must name the same host and port as the request target (for
//     CONNECT, a Host without a port means the target's).
//     The proxy reads request lines and headers itself (with net/textproto, as net/http
//     does): http.ReadRequest would drop the Host header and decode escapes in hosts.
//  2. The port must be allowed for the method (403).
//  3. The [Decider] (a *policy.Policy) decides the host name, deny winning; an IP literal
//     is decided like a name (the policy allows one only if it lists it literally).
//     Names it denies are never resolved: DNS for unlisted names does not leave the host.
//     Then the request's capability token, if it carries one (Proxy-Authorization: Bearer,
//     or Basic with the token as the user name), must allow connecting to the host for
//     this sandbox ([Options.Capabilities]; 403 naming the token's ID otherwise): a token
//     only narrows what the policy allows. A decision that requires one
//     (policy.Decision.RequireCapability: network.require_capability) refuses a request
//     without it with 407.
//  4. The proxy resolves the name itself ([Options.Resolver]; the sandbox's DNS is never
//     used) and refuses every address that is loopback, private (RFC 1918, fc00::/7),
//     link-local, shared (CGNAT 100.64/10), unspecified, multicast, broadcast, reserved
//     or documentation space, a cloud metadata endpoint (169.254.169.254, fd00:ec2::254,
//     100.100.100.200, 168.63.129.16, …), an address of this host's own interfaces, or
//     the IPv4-mapped or NAT64 (64:ff9b::/96) form of any of these; IPv4-compatible,
//     6to4, Teredo and local-use NAT64 addresses are refused whatever they embed. This
//     holds even when the name is allowed, and for IP literals too; only
//     [Options.UnsafeAllowAddrs] (for tests) exempts an address. Only the addresses that
//     pass are dialed; when none does, 403.
//  5. It connects to exactly an address it checked, never to the name again, so the
//     answer cannot change between check and use; the default dialer checks the socket
//     address once more just before connect(2).
//  6. For CONNECT, once the tunnel is open, the first bytes must be a TLS ClientHello
//     (unless [Options.AllowOpaqueTunnels]) whose server name (SNI) is the CONNECT host:
//     a ClientHello naming another host, or no host when CONNECT named one, is refused
//     with a TLS access_denied alert and nothing of it reaches the upstream. The
//     ClientHello is read with a small bounds-checked parser, at most 64KiB, and may span
//     several TLS records; duplicate extensions, two server names and trailing bytes are
//     refused.
//
// Every decision — refused, failed, opened, and closed with the bytes moved each way — is
// logged with slog and sent to [Options.Audit] as an [Event] naming the sandbox, the
// host, the port, the rule and reason, and the address; the counters
// paddock_egress_requests_total{decision} and paddock_egress_bytes_total{direction}
// count them.
//
// Plain HTTP requests are forwarded in origin form with the Host the proxy decided, the
// hop-by-hop headers (Connection and the headers it names, Keep-Alive, Proxy-Connection,
// TE, Trailer, Transfer-Encoding, Upgrade) and Proxy-Authorization and
// Proxy-Authenticate removed both ways, one upstream connection per request. Bodies are
// re-framed by the proxy (a request with both Content-Length and Transfer-Encoding, or a
// coding other than chunked, is refused), so no message is read one way by the proxy
// and another by the upstream. Expect: 100-continue is answered by the proxy. Bodies
// and tunnels stream without being buffered — on Linux, spliced from socket to socket
// inside the kernel. Request headers are bounded ([Options.MaxHeaderBytes]) and must
// arrive within [Options.HeaderTimeout]; an upstream's response headers are bounded too
// (1MiB); dialing is bounded by [Options.DialTimeout]; an exchange or tunnel that moves
// no byte either way for [Options.IdleTimeout] is closed; a sandbox has at most
// [Options.MaxConns] connections open at once.
//
// # What it does not check
//
// Inside a TLS tunnel the proxy sees only the ClientHello: the HTTP Host header, paths
// and everything else are encrypted, so a server that routes by the inner Host header
// rather than by SNI (some CDNs) can still be fronted through an allowed name on it. Only
// the first ClientHello is inspected (not a renegotiation). With Encrypted Client Hello
// the outer SNI names the provider's public name, which is refused unless the policy
// allows that name — and then the inner name is not seen. A tunnel of another protocol
// (with AllowOpaqueTunnels) is not inspected at all. An allowed host can relay anywhere
// it likes (an open proxy or a redirector on an allowed name is an open door): the
// policy must list hosts that do not. Plain HTTP protocol upgrades (WebSocket over
// http://) are not forwarded; use CONNECT. HTTP/2 to the proxy itself (h2c) is not
// spoken. Trailers of chunked request and response bodies are dropped. Name resolution
// uses the host's resolver, so a listed name's answers come from the host's DNS.
package egress
