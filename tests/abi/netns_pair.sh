# Sourced by the tests across network namespaces: makes two, $ns_a and
# $ns_b (named after $1 and this shell's pid), removed when the test exits;
# exits 77 (skipped) where they cannot be made (not root, no CAP_NET_ADMIN).
netns_pair() {
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
  ns_a=braid-$1a-$$ ns_b=braid-$1b-$$
  trap 'ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null' EXIT
  if ! ip netns add "$ns_a" 2>/dev/null; then echo "SKIP: cannot create network namespaces"; exit 77; fi
  ip netns add "$ns_b"
}
