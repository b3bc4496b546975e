"""An emulated cluster on one machine: hosts as network namespaces, NICs shaped with tc tbf.

Each NIC is a network namespace holding the ranks behind it, with one veth
("nic0") into a bridge in the root namespace that plays the switch.  The NIC
is shaped both ways with `tc tbf` at its rate: on the namespace's side of the
veth (what the host sends) and on the bridge's side (what it receives).  A
host has one NIC, or, for rail topologies (a NIC per GPU), one per rank; then
a host is several namespaces whose ranks share a BRAID_HOSTID.  Ranks of one
host talk over shared memory (namespaces isolate the network only, not
/dev/shm), across hosts over TCP through the shaped NICs.

Latency: this kernel has tbf but not netem, so no delay is added.  A link's
latency is what the machine gives (veth, bridge, TCP), measured at bring-up
(`latency_us`, a TCP round trip halved) and written into the emulated
topology's alpha.  At the megabyte sizes the comparisons use, the wire time
dominates it.

Rails (rails=K): each host is one namespace with K NICs, nic0..nicK-1, NIC k
on rail k (a bridge of its own, subnet 10.(77+k)/16), every rank of the host
seeing all of them: a machine with a NIC per rail whose ranks choose among
them (BRAID_SOCKET_IFNAME=nic, `socket_ifname`), as clouds' multi-NIC VMs.

Per-flow caps (--flow-mbps), as clouds cap each TCP flow: the NIC is then
shaped with htb instead, its rate the parent class of FLOW_CLASSES child
classes capped at the flow rate, and a packet goes to the child its source port
picks (bits 1-4: Linux's connect() prefers even ports, so bit 0 tells
nothing).  A flow is in one class, so it never passes the flow rate; flows
whose ports pick the same class share it, so K streams move at most K flow
rates and fewer where their ports collide (`class_bytes` shows the spread).
This kernel has no fq, whose maxrate would cap each flow exactly.

Rates are payload-exact as far as that goes: tbf counts Ethernet frames, so
TCP payload moves at rate * (MTU - 52) / (MTU + 14) (headers and timestamps);
`payload_mbps` says what that is, and the emulated topology's beta uses it.

Everything is torn down on exit, on an exception, on SIGINT/SIGTERM/SIGHUP:
the rank processes (their process groups, and any process left in a
namespace), the namespaces (with their veths) and the bridge.  Names carry the
owner's pid (bcl<pid>...), so a run killed with SIGKILL is cleaned up by the
next one (or `scripts/cluster clean`).

Standard library only.  Used by scripts/cluster, perf/cluster_compare and
tests/cluster/cluster_exact.sh.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

PREFIX = "bcl"
FLOW_CLASSES = 16  # htb children under --flow-mbps, picked by source-port bits 1-4
SUBNET = "10.77"  # host h, NIC k: 10.77.<h>.<k+1>/16 (each cluster is private: its bridge has no address);
#                  rail r > 0 of host h: 10.<77+r>.<h>.1/16
MTU = 1500


class ClusterError(Exception):
    pass


class Unsupported(ClusterError):
    """The machine cannot run an emulated cluster (not root, no netns or tc): tests skip on it."""


def run(cmd, check=True, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and out.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)}: {out.stderr.strip() or out.stdout.strip() or 'failed'}")
    return out


def check_prerequisites():
    """Raises Unsupported with a clear reason when this machine cannot host a cluster."""
    if os.geteuid() != 0:
        raise Unsupported("needs root: network namespaces, veth, bridges and tc need CAP_NET_ADMIN "
                          "(run as root, or with sudo)")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2")):
        if not shutil.which(tool):
            raise Unsupported(f"'{tool}' not found (Debian package {package})")
    probe = f"{PREFIX}{os.getpid()}probe"
    try:
        if run(["ip", "netns", "add", probe], check=False).returncode != 0:
            raise Unsupported("cannot create a network namespace (ip netns add failed: no CAP_SYS_ADMIN, "
                              "or the kernel lacks CONFIG_NET_NS)")
        out = run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "100mbit",
                   "burst", "32kb", "latency", "10ms"], check=False)
        if out.returncode != 0:
            raise Unsupported(f"tc cannot add a tbf qdisc ({out.stderr.strip()}): the kernel lacks sch_tbf")
    finally:
        run(["ip", "netns", "del", probe], check=False)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _ours(name):
    m = re.match(rf"{PREFIX}(\d+)", name)
    return int(m.group(1)) if m else None


def leftovers(owner=None):
    """Namespaces and links named by clusters (of `owner`, or of any pid)."""
    spaces = [line.split()[0] for line in run(["ip", "netns", "list"], check=False).stdout.splitlines() if line.strip()]
    links = re.findall(r"^\d+: ([^:@]+)[:@]", run(["ip", "-o", "link", "show"], check=False).stdout, re.M)
    pick = lambda n: _ours(n) is not None and (owner is None or _ours(n) == owner)
    return [n for n in spaces if pick(n)], [n for n in links if pick(n)]


def _kill_namespace_processes(ns):
    pids = [int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in pids if _pid_alive(p)]
        for p in live:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        if not live:
            return
        deadline = time.time() + 2
        while time.time() < deadline and any(_pid_alive(p) for p in live):
            time.sleep(0.05)


def remove(spaces, links):
    for ns in spaces:
        _kill_namespace_processes(ns)
        run(["ip", "netns", "del", ns], check=False)
    for link in links:  # bridges, and any veth whose namespace went first
        run(["ip", "link", "del", link], check=False)


def clean_stale():
    """Removes what clusters whose owner process is gone left behind; returns the names."""
    spaces, links = leftovers()
    spaces = [n for n in spaces if not _pid_alive(_ours(n))]
    links = [n for n in links if not _pid_alive(_ours(n))]
    remove(spaces, links)
    return spaces + links


def braid_topology(braid_cli, spec, nodes=0):
    """Any topology braid synth reads (built-in name, braid or TACCL JSON), as braid's JSON."""
    cmd = [braid_cli, "topo", spec, "--json"] + (["--nodes", str(nodes)] if nodes else [])
    out = run(cmd, check=False)
    if out.returncode != 0:
        raise ClusterError(f"braid topo {spec}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def link_bandwidth_ratio(topology):
    """Intra-host over inter-host bandwidth of a braid topology (median link of each kind)."""
    def median(values):
        values = sorted(values)
        return values[len(values) // 2]
    intra = [l["beta_us_per_mb"] for l in topology["links"] if l["kind"] != "network"]
    inter = [l["beta_us_per_mb"] for l in topology["links"] if l["kind"] == "network"]
    if not intra or not inter:
        raise ClusterError(f"topology {topology['name']} needs links inside a node and across nodes")
    return median(inter) / median(intra)


class Layout:
    """Who is where: hosts, the NICs of each host, the ranks behind each NIC, and the NIC rate."""

    def __init__(self, hosts, ranks_per_host, nic_mbps, nics_per_host=1, burst="256kb", queue_ms=400,
                 name="flags", intra_mbps=None, flow_mbps=None, rails=1):
        if hosts < 1 or ranks_per_host < 1:
            raise ClusterError("need at least one host and one rank per host")
        if nics_per_host < 1 or ranks_per_host % nics_per_host:
            raise ClusterError(f"{ranks_per_host} ranks per host do not split over {nics_per_host} NICs")
        if hosts * nics_per_host > 250:
            raise ClusterError("at most 250 NICs")
        if nic_mbps <= 0:
            raise ClusterError("the NIC rate must be positive")
        self.hosts, self.ranks_per_host, self.nics_per_host = hosts, ranks_per_host, nics_per_host
        self.nic_mbps, self.burst, self.queue_ms, self.name = float(nic_mbps), burst, queue_ms, name
        self.intra_mbps = intra_mbps  # the rate the topology asks of intra-host links (None: not given)
        if flow_mbps is not None and flow_mbps <= 0:
            raise ClusterError("the flow rate must be positive")
        self.flow_mbps = flow_mbps  # each TCP flow's cap (None: none; the module's header says how)
        if rails < 1 or rails > 9 or (rails > 1 and nics_per_host > 1):
            raise ClusterError("rails: 1 to 9, and a host's namespace holds them all (one NIC namespace per host)")
        self.rails = rails  # NICs every rank of a host sees (the module's header)

    @classmethod
    def from_topology(cls, braid_cli, spec, nodes=0, nic_mbps=None, intra_mbps=None, **kw):
        """The hosts and NICs of a topology; the NIC rate from --nic-mbps, or scaled from the intra-host
        rate so that the topology's intra/inter bandwidth ratio is kept."""
        t = braid_topology(braid_cli, spec, nodes)
        ratio = link_bandwidth_ratio(t) if t["nodes"] > 1 else None
        if nic_mbps is None:
            if intra_mbps is None or ratio is None:
                raise ClusterError("with --topology, give --nic-mbps, or --intra-mbps (the NIC rate is then "
                                   "intra / the topology's intra:inter bandwidth ratio)")
            nic_mbps = intra_mbps / ratio
        elif ratio is not None:
            intra_mbps = nic_mbps * ratio
        nics = t["nics_per_node"] if t["nics_per_node"] >= 1 else 1
        return cls(t["nodes"], t["gpus_per_node"], nic_mbps, nics_per_host=nics, name=t["name"],
                   intra_mbps=intra_mbps, **kw)

    @property
    def nranks(self):
        return self.hosts * self.ranks_per_host

    def host_of(self, rank):
        return rank // self.ranks_per_host

    def nic_of(self, rank):
        """Global NIC index (host-major) of a rank: local GPU g uses NIC g * nics / gpus."""
        local = rank % self.ranks_per_host
        return self.host_of(rank) * self.nics_per_host + local * self.nics_per_host // self.ranks_per_host

    @property
    def payload_mbps(self):
        """TCP payload rate through a NIC: tbf counts frames (Ethernet 14, IP 20, TCP 32 with timestamps)."""
        return self.nic_mbps * (MTU - 52) / (MTU + 14)

    def describe(self):
        per = f"{self.nics_per_host} NICs" if self.nics_per_host > 1 else "1 NIC"
        if self.rails > 1:
            per = f"{self.rails} NICs (rails, every rank seeing them all)"
        text = (f"{self.name}: {self.hosts} hosts x {self.ranks_per_host} ranks, {per} per host at "
                f"{self.nic_mbps:g} MB/s ({self.nic_mbps * 8:g} Mbit/s tbf each way, burst {self.burst}, "
                f"queue {self.queue_ms} ms; TCP payload {self.payload_mbps:.1f} MB/s)")
        if self.intra_mbps:
            text += f"; the topology's ratio asks {self.intra_mbps:.0f} MB/s of intra-host links"
        if self.flow_mbps:
            text += (f"; each TCP flow capped at {self.flow_mbps:g} MB/s (htb, {FLOW_CLASSES} classes by source "
                     f"port, instead of tbf)")
        return text


class Cluster:
    """Brings a Layout up as namespaces (context manager) and runs commands as its ranks."""

    def __init__(self, layout, log=None, nice=0):
        self.layout = layout
        self.tag = f"{PREFIX}{os.getpid()}"
        self.bridge = f"{self.tag}br"
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.procs = []
        self.latency_us = None
        self._launches = 0
        self._old_handlers = {}
        # The ranks' scheduling priority (nice -20..19).  A real cluster's hosts do not share their CPUs
        # with other work; where this machine is shared, a negative value keeps others' jobs from
        # descheduling the ranks (a ring stalls at every rank that waits for a CPU).
        self.nice = nice
        # The interfaces the ranks' sockets use (BRAID_SOCKET_IFNAME): with rails, set to "nic" for all.
        self.socket_ifname = "=nic0"

    def namespace(self, nic):
        return f"{self.tag}n{nic}"

    def address(self, nic, rail=0):
        h, k = divmod(nic, self.layout.nics_per_host)
        return f"{SUBNET}.{h}.{k + 1}" if rail == 0 else f"10.{77 + rail}.{h}.1"

    def rail_bridge(self, rail):
        return self.bridge if rail == 0 else f"{self.tag}r{rail}br"

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def _on_signal(self, signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def up(self):
        check_prerequisites()
        stale = clean_stale()
        if stale:
            self.log(f"cluster: removed what an earlier run left behind: {' '.join(stale)}")
        L = self.layout
        for rail in range(L.rails):
            run(["ip", "link", "add", self.rail_bridge(rail), "type", "bridge"])
            run(["ip", "link", "set", self.rail_bridge(rail), "up"])
        rate = f"{L.nic_mbps * 8:.3f}mbit"
        shape = ["tbf", "rate", rate, "burst", L.burst, "latency", f"{L.queue_ms}ms"]

        def shaped(qdisc_add):
            return self._shape_flows(qdisc_add) if L.flow_mbps else run(qdisc_add + ["root"] + shape)

        for nic in range(L.hosts * L.nics_per_host):
            ns = self.namespace(nic)
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            for rail in range(L.rails):
                # Rail 0 keeps the names of a cluster without rails (bcl<pid>v<nic>, p<nic>).
                mid = f"r{rail}" if rail else ""
                outer, inner, dev = f"{self.tag}{mid}v{nic}", f"{self.tag}{mid}p{nic}", f"nic{rail}"
                run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
                run(["ip", "link", "set", inner, "netns", ns])
                run(["ip", "-n", ns, "link", "set", inner, "name", dev])
                run(["ip", "-n", ns, "addr", "add", f"{self.address(nic, rail)}/16", "dev", dev])
                run(["ip", "-n", ns, "link", "set", dev, "mtu", str(MTU)])
                run(["ip", "-n", ns, "link", "set", dev, "up"])
                run(["ip", "link", "set", outer, "master", self.rail_bridge(rail)])
                run(["ip", "link", "set", outer, "up"])
                # What the host sends (its side of the veth), and what it receives (the bridge's side).
                shaped(["tc", "-n", ns, "qdisc", "add", "dev", dev])
                shaped(["tc", "qdisc", "add", "dev", outer])
        self.latency_us = self.measure_latency()
        self.log(f"cluster: up: {L.describe()}; one-way latency {self.latency_us:.0f} us (TCP round trip / 2, "
                 f"not added: no netem)")

    def _shape_flows(self, qdisc_add):
        """htb on one veth end (`qdisc_add`: tc ... qdisc add dev DEV): the NIC rate over FLOW_CLASSES
        children each capped at the flow rate, a packet's child picked by its TCP source port (IPv4)."""
        L = self.layout
        tc = qdisc_add[:qdisc_add.index("qdisc")]
        dev = qdisc_add[qdisc_add.index("dev"):][:2]
        # A child's assured rate is its share of the NIC, its ceiling the flow rate: what it moves beyond
        # the share it borrows from the parent, whose rate is the NIC's (htb never caps assured rates by
        # the parent's, so children assured the flow rate each would pass the NIC together).
        nic, flow = f"{L.nic_mbps * 8:.3f}mbit", f"{L.flow_mbps * 8:.3f}mbit"
        share = f"{min(L.flow_mbps, L.nic_mbps / FLOW_CLASSES) * 8:.3f}mbit"
        run(qdisc_add + ["root", "handle", "1:", "htb", "default", "1"])
        run(tc + ["class", "add"] + dev + ["parent", "1:", "classid", "1:1", "htb", "rate", nic, "ceil", nic,
                                          "burst", L.burst])
        for k in range(FLOW_CLASSES):
            run(tc + ["class", "add"] + dev + ["parent", "1:1", "classid", f"1:{0x10 + k:x}", "htb", "rate", share,
                                              "ceil", flow, "burst", L.burst])
            run(tc + ["filter", "add"] + dev + ["parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
                                               "sport", str(k << 1), "0x1e", "flowid", f"1:{0x10 + k:x}"])

    def tx_bytes(self, nic=0, rail=0):
        """Bytes a NIC (rail `rail` of a host with rails) has sent."""
        path = f"/sys/class/net/nic{rail}/statistics/tx_bytes"
        return int(run(self.exec_in(nic, ["cat", path])).stdout)

    def class_bytes(self, nic=0):
        """Bytes sent through each flow class of a NIC (its namespace's side), with --flow-mbps."""
        out = run(["tc", "-n", self.namespace(nic), "-s", "class", "show", "dev", "nic0"]).stdout
        found = re.findall(r"class htb 1:(\w+) parent 1:1 .*?\n\s*Sent (\d+) bytes", out, re.S)
        return {int(cid, 16) - 0x10: int(sent) for cid, sent in found}

    def down(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not stop the teardown
        try:
            self.stop_ranks()
            spaces, links = leftovers(os.getpid())
            remove(spaces, links)
            spaces, links = leftovers(os.getpid())
            if spaces or links:
                self.log(f"cluster: could not remove: {' '.join(spaces + links)}")
        finally:
            for sig, old in self._old_handlers.items():
                signal.signal(sig, old)
            self._old_handlers = {}

    def stop_ranks(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 3
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs = []

    def exec_in(self, nic, cmd):
        return ["ip", "netns", "exec", self.namespace(nic)] + cmd

    def measure_latency(self, rounds=200):
        """Half a TCP round trip of one byte between the first two NICs' namespaces (us)."""
        nics = self.layout.hosts * self.layout.nics_per_host
        if nics < 2:
            return 0.0
        code = ("import socket,sys,time\n"
                "if sys.argv[1]=='s':\n"
                " l=socket.socket();l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);l.bind(('',5999));l.listen(1)\n"
                " print('ready',flush=True);c,_=l.accept();c.setsockopt(6,1,1)\n"
                " while (b:=c.recv(1)):c.sendall(b)\n"
                "else:\n"
                " c=socket.create_connection((sys.argv[2],5999));c.setsockopt(6,1,1);n=int(sys.argv[3]);best=[]\n"
                " for i in range(n):\n"
                "  t=time.perf_counter();c.sendall(b'x');c.recv(1);best.append(time.perf_counter()-t)\n"
                " best.sort();print(best[len(best)//2]*1e6/2)\n")
        server = subprocess.Popen(self.exec_in(1, [sys.executable, "-c", code, "s"]), stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        try:
            server.stdout.readline()
            out = run(self.exec_in(0, [sys.executable, "-c", code, "c", self.address(1), str(rounds)]), timeout=60)
            return float(out.stdout.strip())
        finally:
            server.kill()
            server.wait()

    def measure_stream(self, megabytes=100):
        """TCP payload rate (MB/s) of one stream from the first NIC's namespace to the second's."""
        code = ("import socket,sys,time\n"
                "if sys.argv[1]=='s':\n"
                " l=socket.socket();l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);l.bind(('',5998));l.listen(1)\n"
                " print('ready',flush=True);c,_=l.accept();n=0;t=None\n"
                " while (b:=c.recv(1<<20)):\n"
                "  t=t or time.perf_counter();n+=len(b)\n"
                " print(n/(time.perf_counter()-t)/1e6)\n"
                "else:\n"
                " c=socket.create_connection((sys.argv[2],5998));b=b'x'*(1<<20)\n"
                " for i in range(int(sys.argv[3])):c.sendall(b)\n")
        server = subprocess.Popen(self.exec_in(1, [sys.executable, "-c", code, "s"]), stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        try:
            server.stdout.readline()
            run(self.exec_in(0, [sys.executable, "-c", code, "c", self.address(1), str(megabytes)]), timeout=120)
            return float(server.communicate(timeout=60)[0].strip())
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()

    def rank_env(self, rank, port):
        L = self.layout
        return {
            "NCCL_COMM_ID": f"{self.address(L.nic_of(0))}:{port}",
            "BRAID_HOSTID": f"{self.tag}-host{L.host_of(rank)}",
            "BRAID_SOCKET_IFNAME": self.socket_ifname,
            "BRAID_PERF_RANK": str(rank),
            "BRAID_PERF_NRANKS": str(L.nranks),
            # The names other launchers use (torchrun), for a test client.
            "RANK": str(rank), "WORLD_SIZE": str(L.nranks),
            "LOCAL_RANK": str(rank % L.ranks_per_host), "LOCAL_WORLD_SIZE": str(L.ranks_per_host),
        }

    def launch(self, cmd, env=None, timeout=None, ranks=None, capture=True):
        """Runs `cmd` as every rank (or `ranks`: a count, placed from rank 0), each in its NIC's
        namespace; returns (exit codes, rank 0's stdout, all ranks' stderr, seconds, CPU use).
        CPU use: the machine's busy share of all its CPUs over the run, and the ranks' own CPU seconds."""
        L = self.layout
        n = L.nranks if ranks is None else ranks
        self._launches += 1
        port = 20000 + (self._launches * 2) % 20000
        base = dict(os.environ if env is None else env)
        self.procs = []
        stat0, t0 = _cpu_times(), time.time()
        for rank in range(n):
            e = dict(base, **self.rank_env(rank, port))
            e["BRAID_PERF_NRANKS"] = e["WORLD_SIZE"] = str(n)
            niced = (["nice", "-n", str(self.nice)] if self.nice else []) + list(cmd)
            p = subprocess.Popen(self.exec_in(L.nic_of(rank), niced), env=e, start_new_session=True, text=True,
                                 stdout=subprocess.PIPE if capture else None,
                                 stderr=subprocess.PIPE if capture else None)
            self.procs.append(p)
        codes, stdouts, stderrs = self._wait_all(timeout, capture)
        seconds = time.time() - t0
        stat1 = _cpu_times()
        busy = (stat1[0] - stat0[0]) / max(1e-9, stat1[1] - stat0[1])
        rank_cpu = sum(self._rusage.values())
        user = sum(u for u, _ in self._rusage_split.values())
        self.procs = []
        return codes, stdouts[0] if stdouts else "", stderrs, seconds, {"busy": busy, "rank_cpu_s": rank_cpu,
                                                                         "rank_user_s": user, "samples": self._samples}

    def _wait_all(self, timeout, capture):
        """Waits for every rank; the first to fail (or the timeout) stops the others 5 s later, as mpirun
        does.  Reaps with wait4 for each rank's CPU time; threads drain the pipes."""
        n = len(self.procs)
        self._rusage, self._rusage_split = {}, {}
        outs, errs = [""] * n, [""] * n

        def drain(stream, into, i):
            into[i] = stream.read()

        threads = []
        if capture:
            for i, p in enumerate(self.procs):
                threads += [threading.Thread(target=drain, args=(p.stdout, outs, i), daemon=True),
                            threading.Thread(target=drain, args=(p.stderr, errs, i), daemon=True)]
        for t in threads:
            t.start()
        deadline = None if timeout is None else time.time() + timeout
        failed_at = None
        self._samples, next_sample = [], 0.0
        while any(p.returncode is None for p in self.procs):
            if time.time() >= next_sample:
                next_sample = time.time() + 0.02
                self._samples.append((time.time(), *_cpu_times(), [_process_ticks(p.pid) for p in self.procs]))
            for i, p in enumerate(self.procs):
                if p.returncode is not None:
                    continue
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid != p.pid:
                    continue
                p.returncode = os.waitstatus_to_exitcode(status)
                self._rusage[i] = usage.ru_utime + usage.ru_stime
                self._rusage_split[i] = (usage.ru_utime, usage.ru_stime)
                if p.returncode != 0 and failed_at is None:
                    failed_at = time.time()
            if (failed_at is not None and time.time() - failed_at > 5) or (deadline and time.time() > deadline):
                if deadline and time.time() > deadline:
                    self.log(f"cluster: ranks still running after {timeout} s: stopped")
                    deadline = None
                failed_at = failed_at or time.time()
                for p in self.procs:
                    if p.returncode is None:
                        try:
                            os.killpg(p.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            time.sleep(0.01)
        for t in threads:
            t.join()
        for p in self.procs:
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()
        return [p.returncode for p in self.procs], outs, errs


def _process_ticks(pid):
    """A process's user + system CPU time in clock ticks (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def cpu_while(samples, active_rank=None):
    """From launch()'s samples: (the machine's busy share, the ranks' CPU share) over the intervals where
    `active_rank` used CPU (a late rank: after it arrived), or over the whole run."""
    hz = os.sysconf("SC_CLK_TCK")
    busy = total = ranks = seconds = 0.0
    for (t0, b0, tot0, r0), (t1, b1, tot1, r1) in zip(samples, samples[1:]):
        if active_rank is not None and r1[active_rank] <= r0[active_rank]:
            continue
        busy, total, seconds = busy + b1 - b0, total + tot1 - tot0, seconds + t1 - t0
        ranks += sum(max(0, b - a) for a, b in zip(r0, r1)) / hz
    if seconds == 0:
        return float("nan"), float("nan")
    return busy / max(1, total), ranks / (seconds * os.cpu_count())


def _cpu_times():
    """(busy, total) jiffies over all CPUs from /proc/stat; busy includes softirq (the network stack)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return total - idle, total
