//! Which container a process runs in, read from its cgroup path (`/proc/PID/cgroup`): the
//! runtimes name their cgroups in a few well-known shapes, one per runtime and cgroup
//! driver. What is recognised:
//!
//! | runtime | cgroupfs driver | systemd driver |
//! |---|---|---|
//! | Docker | `/docker/<id>` | `/system.slice/docker-<id>.scope` |
//! | Kubernetes (containerd, CRI-O) | `/kubepods/<qos>/pod<uid>/<id>` | `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/cri-containerd-<id>.scope` (or `crio-<id>.scope`, `docker-<id>.scope`) |
//! | Podman | `/libpod_parent/libpod-<id>` | `/machine.slice/libpod-<id>.scope` (also under `user.slice`) |
//! | systemd-nspawn | | `/machine.slice/systemd-nspawn@<name>.service`, `/machine.slice/machine-<name>.scope` |
//!
//! In the systemd driver's spelling the pod UID's dashes are underscores; they are turned
//! back. Guaranteed-QoS pods have no `<qos>` level. Anything else is no container.

/// A container, as its cgroup path names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// `docker`, `kubernetes`, `podman` or `nspawn`.
    pub runtime: &'static str,
    /// The container id (64 hex digits for the OCI runtimes), or the machine's name.
    pub id: String,
    /// The Kubernetes pod UID, for a pod's container.
    pub pod_uid: Option<String>,
}

fn is_id(s: &str) -> bool {
    s.len() >= 12 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The id in a `<prefix><id>.scope` or bare `<id>` component, for the prefixes runtimes use.
fn scoped_id(c: &str) -> Option<&str> {
    let c = c.strip_suffix(".scope").unwrap_or(c);
    let id = ["cri-containerd-", "crio-", "docker-", "libpod-", ""]
        .iter()
        .find_map(|p| c.strip_prefix(p).filter(|rest| is_id(rest)))?;
    Some(id)
}

/// The pod UID in a `pod<uid>` (cgroupfs) or `kubepods-<qos>-pod<uid_>.slice` (systemd)
/// component.
fn pod_uid(c: &str) -> Option<String> {
    let c = c.strip_suffix(".slice").unwrap_or(c);
    let at = c.rfind("pod")?;
    let uid = &c[at + 3..];
    let ok =
        uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    ok.then(|| uid.replace('_', "-"))
}

/// The container a cgroup path (the part after `0::` in `/proc/PID/cgroup`) belongs to.
pub fn from_cgroup_path(path: &str) -> Option<Container> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(k) = parts.iter().position(|p| p.starts_with("kubepods")) {
        let pod = parts[k..].iter().find_map(|p| pod_uid(p))?;
        let id = parts[k..].iter().rev().find_map(|p| scoped_id(p))?;
        return Some(Container { runtime: "kubernetes", id: id.to_string(), pod_uid: Some(pod) });
    }
    for (i, p) in parts.iter().enumerate().rev() {
        if let Some(name) = p
            .strip_prefix("systemd-nspawn@")
            .and_then(|n| n.strip_suffix(".service"))
            .or_else(|| p.strip_prefix("machine-").and_then(|n| n.strip_suffix(".scope")))
        {
            let name = name.replace("\\x2d", "-");
            return Some(Container { runtime: "nspawn", id: name, pod_uid: None });
        }
        let runtime = if p.starts_with("libpod-") || parts[..i].contains(&"libpod_parent") {
            "podman"
        } else if p.starts_with("docker-") || parts[..i].contains(&"docker") {
            "docker"
        } else {
            continue;
        };
        if let Some(id) = scoped_id(p) {
            return Some(Container { runtime, id: id.to_string(), pod_uid: None });
        }
    }
    None
}

/// The container of a `/proc/PID/cgroup` file's text: its cgroup v2 line (`0::PATH`), or
/// any v1 line's path when there is none.
pub fn from_proc_cgroup(text: &str) -> Option<Container> {
    let v2 = text.lines().find_map(|l| l.strip_prefix("0::"));
    match v2 {
        Some(p) => from_cgroup_path(p.trim()),
        None => text.lines().find_map(|l| from_cgroup_path(l.splitn(3, ':').nth(2)?.trim())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f6b2a1c9d8e7f60112233445566778899aabbccddeeff00112233445566778a";
    const UID: &str = "5c9f3b2e-8d7a-4f1e-9b6c-0a1b2c3d4e5f";

    fn c(runtime: &'static str, id: &str, pod: Option<&str>) -> Option<Container> {
        Some(Container { runtime, id: id.into(), pod_uid: pod.map(str::to_string) })
    }

    #[test]
    fn kubernetes_pods_in_both_drivers_and_every_qos_class() {
        let u_ = UID.replace('-', "_");
        for path in [
            format!("/kubepods/burstable/pod{UID}/{ID}"),
            format!("/kubepods/besteffort/pod{UID}/{ID}"),
            format!("/kubepods/pod{UID}/{ID}"), // guaranteed
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u_}.slice/cri-containerd-{ID}.scope"
            ),
            format!("/kubepods.slice/kubepods-pod{u_}.slice/crio-{ID}.scope"),
            format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u_}.slice/docker-{ID}.scope"
            ),
            // Nested under a node's own cgroup (kind runs the kubelet in a container).
            format!("/docker/{ID}/kubepods/burstable/pod{UID}/{ID}"),
        ] {
            assert_eq!(from_cgroup_path(&path), c("kubernetes", ID, Some(UID)), "{path}");
        }
        // The pod's own cgroup (the pause container's parent) names no container.
        assert_eq!(from_cgroup_path(&format!("/kubepods/burstable/pod{UID}")), None);
    }

    #[test]
    fn docker_podman_and_nspawn() {
        assert_eq!(from_cgroup_path(&format!("/docker/{ID}")), c("docker", ID, None));
        assert_eq!(
            from_cgroup_path(&format!("/system.slice/docker-{ID}.scope")),
            c("docker", ID, None)
        );
        assert_eq!(
            from_cgroup_path(&format!("/machine.slice/libpod-{ID}.scope")),
            c("podman", ID, None)
        );
        assert_eq!(
            from_cgroup_path(&format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"
            )),
            c("podman", ID, None)
        );
        assert_eq!(from_cgroup_path(&format!("/libpod_parent/libpod-{ID}")), c("podman", ID, None));
        assert_eq!(
            from_cgroup_path("/machine.slice/systemd-nspawn@web.service/payload"),
            c("nspawn", "web", None)
        );
        assert_eq!(
            from_cgroup_path("/machine.slice/machine-db\\x2d1.scope"),
            c("nspawn", "db-1", None)
        );
    }

    #[test]
    fn host_paths_are_no_container() {
        for p in [
            "/",
            "/init.scope",
            "/system.slice/sshd.service",
            "/user.slice/user-1000.slice/session-3.scope",
            "/system.slice/docker.service", // the daemon itself
            "/system.slice/containerd.service",
        ] {
            assert_eq!(from_cgroup_path(p), None, "{p}");
        }
    }

    #[test]
    fn proc_cgroup_files_v2_and_v1() {
        let v2 = format!("0::/kubepods/burstable/pod{UID}/{ID}\n");
        assert_eq!(from_proc_cgroup(&v2), c("kubernetes", ID, Some(UID)));
        let v1 = format!(
            "12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n1:name=systemd:/docker/{ID}\n"
        );
        assert_eq!(from_proc_cgroup(&v1), c("docker", ID, None));
        assert_eq!(from_proc_cgroup("0::/init.scope\n"), None);
    }
}
