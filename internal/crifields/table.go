package crifields

// Decision is what rtshimd does with a field.
type Decision string

const (
	// Honoured: applied, or checked and used, as the CRI comment says.
	Honoured Decision = "honoured"
	// Refused: a request setting it (or setting it to what rtshimd cannot do) fails,
	// naming the field.
	Refused Decision = "refused"
	// Ignored: accepted and not used, for the reason in the note.
	Ignored Decision = "ignored"
)

// Entry is a field's decision and what it means.
type Entry struct {
	Decision Decision
	Note     string
}

func h(note string) Entry { return Entry{Honoured, note} }
func r(note string) Entry { return Entry{Refused, note} }
func i(note string) Entry { return Entry{Ignored, note} }

// Table holds a decision for every field of every CRI request (Walk), keyed Message.field.
var Table = map[string]Entry{}

const (
	windowsOnly  = "Windows only: a Linux node's kubelet never sets it, and containerd and CRI-O on Linux ignore it too"
	unimplRPC    = "the RPC answers Unimplemented naming itself (pod checkpoint and restore, alpha): nothing of the request is used"
	listFilter   = "filters the list (exact id, a unique prefix, state, label selector ANDed), as containerd does"
	containerID  = "the container, by ID or unique prefix; an unknown one is NotFound"
	podID        = "the pod sandbox, by ID or unique prefix; an unknown one is NotFound"
	streamFlag   = "which streams the session attaches; none at all is InvalidArgument"
	resourcesMsg = "cgroup limits, through the row's runtime (v1 and v2 files, or the systemd driver)"
)

func init() {
	for k, e := range map[string]Entry{
		"AttachRequest.container_id": h(containerID),
		"AttachRequest.stderr":       h(streamFlag),
		"AttachRequest.stdin":        h(streamFlag),
		"AttachRequest.stdout":       h(streamFlag),
		"AttachRequest.tty":          h("must match the container's tty; stderr is folded into stdout on a terminal"),

		"AuthConfig.auth":           h("base64 user:password for the registry, to containers/image"),
		"AuthConfig.identity_token": h("an OAuth identity token for the registry, to containers/image"),
		"AuthConfig.password":       h("registry password, to containers/image"),
		"AuthConfig.registry_token": h("a bearer token for the registry, to containers/image"),
		"AuthConfig.server_address": h("the registry the credentials are for; kept with them"),
		"AuthConfig.username":       h("registry user, to containers/image"),

		"CDIDevice.name": h("a CDI device name, resolved against `[cdi] spec_dirs`; an unknown device is refused"),

		"Capability.add_ambient_capabilities": h("added to the ambient set (and the inheritable one); an unknown name is InvalidArgument"),
		"Capability.add_capabilities":         h("added to the bounding, effective and permitted sets (ALL: every capability)"),
		"Capability.drop_capabilities":        h("removed from the default set (ALL: every capability)"),

		"CheckpointContainerRequest.container_id": h(containerID),
		"CheckpointContainerRequest.location":     h("the tar the checkpoint is written to (runc checkpoint --leave-running, CRIU)"),
		"CheckpointContainerRequest.timeout":      h("seconds the checkpoint may take; negative is InvalidArgument"),

		"CheckpointPodRequest.container_ids":  r(unimplRPC),
		"CheckpointPodRequest.options":        r(unimplRPC),
		"CheckpointPodRequest.output_path":    r(unimplRPC),
		"CheckpointPodRequest.pod_sandbox_id": r(unimplRPC),
		"RestorePodRequest.checkpoint_path":   r(unimplRPC),
		"RestorePodRequest.config":            r(unimplRPC),
		"RestorePodRequest.container_configs": r(unimplRPC),
		"RestorePodRequest.options":           r(unimplRPC),
		"RestorePodRequest.runtime_handler":   r(unimplRPC),

		"ContainerConfig.CDI_devices": h("CDI devices injected into the spec; an unknown one is refused"),
		"ContainerConfig.annotations": h("copied into the OCI spec's annotations and the container's status; CDI and NRI read them"),
		"ContainerConfig.args":        h("the process's arguments (the image's CMD when unset)"),
		"ContainerConfig.command":     h("the process's entrypoint (the image's ENTRYPOINT when unset)"),
		"ContainerConfig.devices":     h("host devices made in the container, with their cgroup permissions"),
		"ContainerConfig.envs":        h("the process environment, over the image's; a name with `=` is InvalidArgument"),
		"ContainerConfig.image":       h("the image the rootfs is made from (by ID, or a reference pulled on this node); an absolute path is a checkpoint archive to restore"),
		"ContainerConfig.labels":      h("kept and reported; ListContainers filters on them"),
		"ContainerConfig.linux":       h("the Linux part of the spec: resources and security context"),
		"ContainerConfig.log_path":    h("the CRI log, relative to the pod's log_directory; a path leaving it is InvalidArgument"),
		"ContainerConfig.metadata":    h("name and attempt: the container's identity; a duplicate is AlreadyExists"),
		"ContainerConfig.mounts":      h("bind, image and idmapped mounts, with propagation and options"),
		"ContainerConfig.stdin":       h("keeps a stdin pipe for attach"),
		"ContainerConfig.stdin_once":  h("closes stdin after the first attach ends"),
		"ContainerConfig.stop_signal": h("sent by StopContainer instead of the image's STOPSIGNAL; an unknown signal is InvalidArgument"),
		"ContainerConfig.tty":         h("a terminal for the process (the monitor holds its master)"),
		"ContainerConfig.windows":     i(windowsOnly),
		"ContainerConfig.working_dir": h("the process's cwd (the image's WorkingDir when unset), made if missing"),

		"ContainerFilter.id":             h(listFilter),
		"ContainerFilter.label_selector": h(listFilter),
		"ContainerFilter.pod_sandbox_id": h(listFilter),
		"ContainerFilter.state":          h(listFilter),
		"ContainerMetadata.attempt":      h("part of the container's name; reported back"),
		"ContainerMetadata.name":         h("part of the container's name; required (InvalidArgument when empty)"),
		"ContainerStateValue.state":      h("the state a list filter asks for"),

		"ContainerStatsFilter.id":             h(listFilter),
		"ContainerStatsFilter.label_selector": h(listFilter),
		"ContainerStatsFilter.pod_sandbox_id": h(listFilter),
		"ContainerStatsRequest.container_id":  h(containerID),
		"ContainerStatusRequest.container_id": h(containerID),
		"ContainerStatusRequest.verbose":      h("adds the info map: the OCI spec, pid, the runtime's view"),

		"CreateContainerRequest.config":         h("the container's config"),
		"CreateContainerRequest.pod_sandbox_id": h(podID + "; the pod must be ready"),
		"CreateContainerRequest.sandbox_config": i("a copy of the pod's config: rtshimd uses the one RunPodSandbox received, kept in the pod's record (containerd also reads its stored copy)"),

		"DNSConfig.options":  h("written to the pod's resolv.conf"),
		"DNSConfig.searches": h("written to the pod's resolv.conf"),
		"DNSConfig.servers":  h("written to the pod's resolv.conf"),

		"Device.container_path": h("where the device node is made in the container"),
		"Device.host_path":      h("the host device (a directory: every device below it); a missing one is refused"),
		"Device.permissions":    h("the device cgroup's r, w, m; anything else is InvalidArgument"),

		"ExecRequest.cmd":          h("the command run in the container; empty is InvalidArgument"),
		"ExecRequest.container_id": h(containerID + "; it must be running"),
		"ExecRequest.stderr":       h(streamFlag),
		"ExecRequest.stdin":        h(streamFlag),
		"ExecRequest.stdout":       h(streamFlag),
		"ExecRequest.tty":          h("a terminal for the exec; stderr folded into stdout"),

		"ExecSyncRequest.cmd":          h("the command run in the container; empty is InvalidArgument"),
		"ExecSyncRequest.container_id": h(containerID + "; it must be running"),
		"ExecSyncRequest.timeout":      h("seconds before the exec is killed and DeadlineExceeded returned (0: none)"),

		"HugepageLimit.limit":     h("the hugetlb limit of that page size; left out where the node has no hugetlb controller (docs/cri-support.md says why)"),
		"HugepageLimit.page_size": h("which hugetlb file the limit goes to"),

		"IDMapping.container_id": h("first ID of a user-namespace or mount mapping, inside"),
		"IDMapping.host_id":      h("first ID of the mapping, on the host"),
		"IDMapping.length":       h("length of the mapping"),

		"ImageFilter.image": h("ListImages returns the image the spec names, or none; a runtime_handler: its store's"),
		"ImageSpec.annotations": i("meant to help a runtime pick an image within a multi-arch index; rtshimd always picks the node's platform, " +
			"as containerd does on Linux"),
		"ImageSpec.image":                h("the image: a reference to pull, or an ID or reference already pulled"),
		"ImageSpec.image_ref":            i("the digest of an image volume's image, which the runtime reports back; rtshimd resolves image.image itself and reports the image it mounted"),
		"ImageSpec.runtime_handler":      h("a configured row (\"\": the default), else InvalidArgument naming the field; the row's own store if `image_store = \"separate\"`"),
		"ImageSpec.user_specified_image": h("the name the user wrote, reported as the container's image name and kept in checkpoints"),
		"ImageStatusRequest.image":       h("the image asked about; unknown: an empty response, not an error, as the CRI says"),
		"ImageStatusRequest.verbose":     h("adds the image's config as the info map"),

		"Int64Value.value": h("the wrapped number (run_as_user, run_as_group)"),
		"KeyValue.key":     h("an environment variable's name"),
		"KeyValue.value":   h("an environment variable's value"),

		"LinuxContainerConfig.resources":        h(resourcesMsg),
		"LinuxContainerConfig.security_context": h("user, capabilities, seccomp, LSM labels, namespaces, masked and read-only paths"),

		"LinuxContainerResources.cpu_period":                 h("cpu.cfs_period_us / cpu.max"),
		"LinuxContainerResources.cpu_quota":                  h("cpu.cfs_quota_us / cpu.max"),
		"LinuxContainerResources.cpu_shares":                 h("cpu.shares / cpu.weight"),
		"LinuxContainerResources.cpuset_cpus":                h("cpuset.cpus"),
		"LinuxContainerResources.cpuset_mems":                h("cpuset.mems"),
		"LinuxContainerResources.hugepage_limits":            h("hugetlb limits per page size (see HugepageLimit)"),
		"LinuxContainerResources.memory_limit_in_bytes":      h("memory.limit_in_bytes / memory.max"),
		"LinuxContainerResources.memory_swap_limit_in_bytes": h("memory.memsw.limit_in_bytes / memory.swap.max (as the swap part on v2)"),
		"LinuxContainerResources.oom_score_adj":              h("the process's oom_score_adj, clamped to what the daemon itself may set (no CAP_SYS_RESOURCE: not below its own)"),
		"LinuxContainerResources.unified":                    h("cgroup v2 files written as given; on a v1 node InvalidArgument naming the key"),

		"LinuxContainerSecurityContext.apparmor":                   h("RuntimeDefault: rtshimd's profile; Localhost: the named loaded profile, refused where AppArmor is off; Unconfined"),
		"LinuxContainerSecurityContext.apparmor_profile":           h("the deprecated string form, read when apparmor is unset"),
		"LinuxContainerSecurityContext.capabilities":               h("added to and dropped from the default set"),
		"LinuxContainerSecurityContext.masked_paths":               h("the spec's masked paths (kubelet's procMount; empty lists in a user namespace: Unmasked)"),
		"LinuxContainerSecurityContext.namespace_options":          h("PID namespace of the container (POD, CONTAINER, NODE, TARGET) and the user namespace"),
		"LinuxContainerSecurityContext.no_new_privs":               h("the process's noNewPrivileges"),
		"LinuxContainerSecurityContext.privileged":                 h("all capabilities and devices, no seccomp or masking; refused unless the pod is privileged"),
		"LinuxContainerSecurityContext.readonly_paths":             h("the spec's read-only paths (kubelet's procMount)"),
		"LinuxContainerSecurityContext.readonly_rootfs":            h("the rootfs mounted read-only"),
		"LinuxContainerSecurityContext.run_as_group":               h("the process's GID; set without a user is InvalidArgument"),
		"LinuxContainerSecurityContext.run_as_user":                h("the process's UID"),
		"LinuxContainerSecurityContext.run_as_username":            h("resolved in the image's /etc/passwd; a name the image lacks is refused"),
		"LinuxContainerSecurityContext.seccomp":                    h("RuntimeDefault (Docker's default profile), Localhost (a JSON profile on the host), Unconfined"),
		"LinuxContainerSecurityContext.seccomp_profile_path":       h("the deprecated string form, read when seccomp is unset"),
		"LinuxContainerSecurityContext.selinux_options":            h("process and mount labels through go-selinux where SELinux is on; elsewhere a warning, or InvalidArgument with strict_selinux"),
		"LinuxContainerSecurityContext.supplemental_groups":        h("added to the process's groups"),
		"LinuxContainerSecurityContext.supplemental_groups_policy": h("Merge (with the image's /etc/group) or Strict; advertised in Status"),

		"LinuxPodSandboxConfig.cgroup_parent":    h("the pod's cgroup (a path, or a slice with the systemd driver)"),
		"LinuxPodSandboxConfig.overhead":         h("the row's overhead as kubelet sends it: added to the pod cgroup's limits"),
		"LinuxPodSandboxConfig.resources":        h("the pod's cgroup limits, for sandboxing rows' sizing too"),
		"LinuxPodSandboxConfig.security_context": h("the pod's namespaces, user, seccomp and LSM labels"),
		"LinuxPodSandboxConfig.sysctls":          h("namespaced sysctls set in the pod's namespaces; one the pod's namespaces cannot hold is InvalidArgument"),

		"LinuxSandboxSecurityContext.apparmor":                   h("the sandbox container's profile, as for a container"),
		"LinuxSandboxSecurityContext.namespace_options":          h("network, PID, IPC (POD or NODE) and the user namespace of the pod"),
		"LinuxSandboxSecurityContext.privileged":                 h("allows privileged containers in the pod; the sandbox container unconfined"),
		"LinuxSandboxSecurityContext.readonly_rootfs":            i("the sandbox container's root (the pause binary alone) is always read-only, so the field changes nothing"),
		"LinuxSandboxSecurityContext.run_as_group":               h("the sandbox process's GID; set without run_as_user is InvalidArgument"),
		"LinuxSandboxSecurityContext.run_as_user":                h("the sandbox process's UID"),
		"LinuxSandboxSecurityContext.seccomp":                    h("the sandbox container's seccomp filter"),
		"LinuxSandboxSecurityContext.seccomp_profile_path":       h("the deprecated string form, read when seccomp is unset"),
		"LinuxSandboxSecurityContext.selinux_options":            h("the pod's labels (its containers' level); as for a container where SELinux is off"),
		"LinuxSandboxSecurityContext.supplemental_groups":        i("the pause process needs no groups; kubelet repeats the pod's groups in every container's context, where they are applied"),
		"LinuxSandboxSecurityContext.supplemental_groups_policy": i("as supplemental_groups: kubelet repeats the policy in every container's context, where it is applied"),

		"ListContainerStatsRequest.filter":    h(listFilter),
		"ListContainersRequest.filter":        h(listFilter),
		"ListImagesRequest.filter":            h("one image by its spec, else all (spec.runtime_handler: the store's)"),
		"ListPodSandboxRequest.filter":        h(listFilter),
		"ListPodSandboxStatsRequest.filter":   h(listFilter),
		"StreamContainerStatsRequest.filter":  h(listFilter),
		"StreamContainersRequest.filter":      h(listFilter),
		"StreamImagesRequest.filter":          h("one image by its spec, else all"),
		"StreamPodSandboxStatsRequest.filter": h(listFilter),
		"StreamPodSandboxesRequest.filter":    h(listFilter),

		"Mount.container_path":      h("the mount's destination; relative or missing is InvalidArgument"),
		"Mount.gidMappings":         h("an idmapped mount: only the pod's own mappings, in a user-namespaced pod"),
		"Mount.host_path":           h("the bind mount's source; a missing path is refused, never created"),
		"Mount.image":               h("an image volume: the image's rootfs, read-only"),
		"Mount.image_sub_path":      h("a directory of the image volume's rootfs; one leaving it is refused"),
		"Mount.mount_options":       h("noexec, nodev, nosuid added to the bind mount; others refused; advertised in Status"),
		"Mount.propagation":         h("private, rslave (HOST_TO_CONTAINER), rshared (BIDIRECTIONAL; not on runsc); refused if the host mount does not propagate"),
		"Mount.readonly":            h("a read-only bind mount"),
		"Mount.recursive_read_only": h("ro and rro where the pod's row had feature recursive_read_only_mounts when the pod was made; InvalidArgument elsewhere"),
		"Mount.selinux_relabel":     h("the host path relabeled with the container's label where SELinux is on; elsewhere a warning, or InvalidArgument with strict_selinux"),
		"Mount.uidMappings":         h("an idmapped mount: only the pod's own mappings, in a user-namespaced pod"),

		"NamespaceOption.ipc":            h("the pod's own IPC namespace or the node's"),
		"NamespaceOption.network":        h("the pod's own network namespace (CNI) or the node's"),
		"NamespaceOption.pid":            h("the pod's, the container's own, the node's, or a target container's"),
		"NamespaceOption.target_id":      h("the container whose PID namespace a TARGET container joins (ephemeral containers)"),
		"NamespaceOption.userns_options": h("the pod's user namespace (mode POD with its mappings, or NODE)"),

		"NetworkConfig.pod_cidr": h("kept, and shown in Status verbose"),

		"PodSandboxConfig.annotations":   h("kept and reported; copied into the sandbox and container specs; CDI and NRI read them"),
		"PodSandboxConfig.dns_config":    h("the pod's resolv.conf"),
		"PodSandboxConfig.hostname":      h("the pod's UTS hostname and /etc/hostname; invalid is InvalidArgument"),
		"PodSandboxConfig.labels":        h("kept and reported; ListPodSandbox filters on them"),
		"PodSandboxConfig.linux":         h("the Linux part: cgroup parent, security context, sysctls, resources, overhead"),
		"PodSandboxConfig.log_directory": h("where the containers' CRI logs go"),
		"PodSandboxConfig.metadata":      h("name, namespace, uid, attempt: the pod's identity; a duplicate is AlreadyExists"),
		"PodSandboxConfig.port_mappings": h("host ports, through the CNI portmap plugin's capability"),
		"PodSandboxConfig.windows":       i(windowsOnly),

		"PodSandboxFilter.id":                    h(listFilter),
		"PodSandboxFilter.label_selector":        h(listFilter),
		"PodSandboxFilter.state":                 h(listFilter),
		"PodSandboxMetadata.attempt":             h("part of the pod's name; reported back"),
		"PodSandboxMetadata.name":                h("part of the pod's name; required"),
		"PodSandboxMetadata.namespace":           h("part of the pod's name; required"),
		"PodSandboxMetadata.uid":                 h("part of the pod's name; required"),
		"PodSandboxStateValue.state":             h("the state a list filter asks for"),
		"PodSandboxStatsFilter.id":               h(listFilter),
		"PodSandboxStatsFilter.label_selector":   h(listFilter),
		"PodSandboxStatsRequest.pod_sandbox_id":  h(podID),
		"PodSandboxStatusRequest.pod_sandbox_id": h(podID),
		"PodSandboxStatusRequest.verbose":        h("adds the info map: the pod's config, namespaces, runtime"),

		"PortForwardRequest.pod_sandbox_id": h(podID),
		"PortForwardRequest.port":           h("ports the session may forward to, in the pod's network namespace"),

		"PortMapping.container_port": h("the pod's port a host port maps to"),
		"PortMapping.host_ip":        h("the host address the port is bound on; not an IP is InvalidArgument"),
		"PortMapping.host_port":      h("the host port (0: none)"),
		"PortMapping.protocol":       h("TCP, UDP or SCTP, to the portmap plugin"),

		"PullImageRequest.auth":           h("registry credentials for this pull"),
		"PullImageRequest.image":          h("the image to pull"),
		"PullImageRequest.sandbox_config": h("its metadata.namespace picks that namespace's signature policy (`image.signature_policy_dir`, as CRI-O); the rest of a pull is the same for every pod"),

		"RemoveContainerRequest.container_id":    h(containerID + "; an unknown one is success, as the CRI says"),
		"RemoveImageRequest.image":               h("the image to remove; an unknown one is success"),
		"RemovePodSandboxRequest.pod_sandbox_id": h(podID + "; an unknown one is success"),
		"ReopenContainerLogRequest.container_id": h(containerID + "; the monitor reopens the CRI log"),

		"RunPodSandboxRequest.config":          h("the pod's config"),
		"RunPodSandboxRequest.runtime_handler": h("the row of the handler table the pod runs on (\"\": the default); unknown is NotFound, not ready FailedPrecondition with the reason"),

		"RuntimeConfig.network_config":              h("the pod CIDR kubelet sends"),
		"UpdateRuntimeConfigRequest.runtime_config": h("the runtime config kubelet sends (the pod CIDR)"),

		"SELinuxOption.level": h("the label's level (MLS/MCS) where SELinux is on"),
		"SELinuxOption.role":  h("the label's role where SELinux is on"),
		"SELinuxOption.type":  h("the label's type where SELinux is on"),
		"SELinuxOption.user":  h("the label's user where SELinux is on"),

		"SecurityProfile.localhost_ref": h("the Localhost profile: a seccomp JSON file on the host, or a loaded AppArmor profile"),
		"SecurityProfile.profile_type":  h("RuntimeDefault, Unconfined or Localhost"),

		"StartContainerRequest.container_id":   h(containerID + "; it must be created"),
		"StatusRequest.verbose":                h("adds the config and the full handler table to the info map"),
		"StopContainerRequest.container_id":    h(containerID),
		"StopContainerRequest.timeout":         h("seconds between the stop signal and SIGKILL"),
		"StopPodSandboxRequest.pod_sandbox_id": h(podID + "; an unknown one is success"),

		"UpdateContainerResourcesRequest.annotations":  i("meant for experimental resources or update options; rtshimd defines none"),
		"UpdateContainerResourcesRequest.container_id": h(containerID),
		"UpdateContainerResourcesRequest.linux":        h("new limits applied through the runtime (runc update) and kept for the container's status"),
		"UpdateContainerResourcesRequest.windows":      i(windowsOnly),

		"UpdatePodSandboxResourcesRequest.overhead":       h("the pod's overhead, for the pod cgroup"),
		"UpdatePodSandboxResourcesRequest.pod_sandbox_id": h(podID),
		"UpdatePodSandboxResourcesRequest.resources":      h("the pod cgroup's new limits (raised only where the cgroup is kubelet's)"),

		"UserNamespace.gids": h("the pod's GID mappings"),
		"UserNamespace.mode": h("POD (a user namespace of the pod's own) or NODE; CONTAINER and TARGET are InvalidArgument"),
		"UserNamespace.uids": h("the pod's UID mappings"),

		"VersionRequest.version": i("the kubelet's CRI version, informational: rtshimd serves v1 only and answers with its own version, as containerd and CRI-O do"),

		"WindowsContainerConfig.resources":                i(windowsOnly),
		"WindowsContainerConfig.security_context":         i(windowsOnly),
		"WindowsContainerResources.affinity_cpus":         i(windowsOnly),
		"WindowsContainerResources.cpu_count":             i(windowsOnly),
		"WindowsContainerResources.cpu_maximum":           i(windowsOnly),
		"WindowsContainerResources.cpu_shares":            i(windowsOnly),
		"WindowsContainerResources.memory_limit_in_bytes": i(windowsOnly),
		"WindowsContainerResources.rootfs_size_in_bytes":  i(windowsOnly),
		"WindowsContainerSecurityContext.credential_spec": i(windowsOnly),
		"WindowsContainerSecurityContext.host_process":    i(windowsOnly),
		"WindowsContainerSecurityContext.run_as_username": i(windowsOnly),
		"WindowsCpuGroupAffinity.cpu_group":               i(windowsOnly),
		"WindowsCpuGroupAffinity.cpu_mask":                i(windowsOnly),
		"WindowsNamespaceOption.network":                  i(windowsOnly),
		"WindowsPodSandboxConfig.security_context":        i(windowsOnly),
		"WindowsSandboxSecurityContext.credential_spec":   i(windowsOnly),
		"WindowsSandboxSecurityContext.host_process":      i(windowsOnly),
		"WindowsSandboxSecurityContext.namespace_options": i(windowsOnly),
		"WindowsSandboxSecurityContext.run_as_username":   i(windowsOnly),
	} {
		Table[k] = e
	}
}
