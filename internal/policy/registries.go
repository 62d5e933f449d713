package policy

// RegistriesName is the network policy built in under that name (network_policy:
// registries): the public package registries the runtime providers fetch from, and
// nothing else.
const RegistriesName = "registries"

// Registries is the built-in registries policy: npm's registry, Go's module proxy and
// checksum database, and crates.io's index and downloads, through the egress proxy's
// allowlist like any other.
const Registries = `# paddock's built-in network policy "registries".
network:
  default: deny
  allow:
    - registry.npmjs.org
    - proxy.golang.org
    - sum.golang.org
    - index.crates.io
    - static.crates.io
`
