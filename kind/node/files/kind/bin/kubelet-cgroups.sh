#!/bin/sh
# On cgroup v1 systemd creates kubelet.slice only in the hierarchies it manages, but the kubelet
# (cgroupRoot /kubelet, systemd driver) checks it in every one, cpuset and cpuacct included.
# On cgroup v2 there is one hierarchy and systemd's slice is enough.
set -eu
[ -f /sys/fs/cgroup/cgroup.controllers ] && exit 0
for hierarchy in /sys/fs/cgroup/*/; do
  # Only mounted hierarchies (not their aliases, nor empty mount points), and not the ones
  # systemd manages itself.
  [ -f "${hierarchy}cgroup.procs" ] || continue
  case $hierarchy in */systemd/ | */unified/) continue ;; esac
  mkdir -p "${hierarchy}kubelet.slice"
  # A cpuset cgroup takes no task until it has CPUs and memory nodes: its parent's.
  if [ -f "${hierarchy}cpuset.cpus" ]; then
    [ -s "${hierarchy}kubelet.slice/cpuset.cpus" ] || cat "${hierarchy}cpuset.cpus" >"${hierarchy}kubelet.slice/cpuset.cpus"
    [ -s "${hierarchy}kubelet.slice/cpuset.mems" ] || cat "${hierarchy}cpuset.mems" >"${hierarchy}kubelet.slice/cpuset.mems"
  fi
done
