#!/usr/bin/env python3
"""Writes a cgmon-rs destination map (--dest-map) from a cluster's Services and
EndpointSlices, so that records name the service a flow went to (DestService).

    kubectl get services,endpointslices -A -o json | python3 dest-map.py > dests.txt

Each Service's cluster IPs with each of its ports, and each of its endpoints' addresses
with each port of their slice, are named NAMESPACE/SERVICE. Both are needed: behind
kube-proxy a client's peer is the ClusterIP, with socket-level load balancing (Cilium,
Calico eBPF) it is the pod. Headless services have no cluster IP; their pods are named
through their slices. Lines are sorted, so that an unchanged cluster gives an unchanged
file (cgmon-rs reads the map again when the file changes).

To keep it current, run it on a schedule and put the output in a ConfigMap the DaemonSet
mounts (a ConfigMap volume is replaced whole, which is how the map must change):

    python3 dest-map.py < cluster.json > dests.txt &&
      kubectl -n monitoring create configmap cgmon-dest-map --from-file=dests.txt \\
        --dry-run=client -o yaml | kubectl apply -f -
"""
import ipaddress
import json
import sys


def target(addr, port):
    """CIDR:PORT for one address, IPv6 in brackets."""
    ip = ipaddress.ip_address(addr)
    if ip.version == 6:
        return f"[{ip}/128]:{port}"
    return f"{ip}/32:{port}"


def lines(items):
    out = set()
    for it in items:
        kind, meta = it.get("kind"), it.get("metadata", {})
        ns = meta.get("namespace", "default")
        if kind == "Service":
            spec = it.get("spec", {})
            ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
            for ip in ips:
                if not ip or ip == "None":
                    continue
                for p in spec.get("ports", []):
                    if p.get("protocol", "TCP") == "TCP":
                        out.add(f"{target(ip, p['port'])} {ns}/{meta['name']}")
        elif kind == "EndpointSlice":
            svc = meta.get("labels", {}).get("kubernetes.io/service-name")
            if not svc:
                continue
            ports = [p["port"] for p in it.get("ports") or []
                     if p.get("protocol", "TCP") == "TCP" and p.get("port")]
            for ep in it.get("endpoints") or []:
                for addr in ep.get("addresses", []):
                    for port in ports:
                        out.add(f"{target(addr, port)} {ns}/{svc}")
    return sorted(out)


def main():
    doc = json.load(sys.stdin)
    items = doc.get("items", [doc])
    print("# written by examples/kubernetes/dest-map.py from Services and EndpointSlices")
    for line in lines(items):
        print(line)


if __name__ == "__main__":
    main()
