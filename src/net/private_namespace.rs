//! Rule zero for the programs that send multicast in tests and benchmarks
//! (`examples/`): they run only inside a private network namespace, never in
//! the machine's own, whose routes lead out of the machine.

/// Refuses the machine's own network namespace: one with a default route
/// (IPv4 or IPv6), which leads out of the machine, or that of PID 1 when
/// that can be read.
pub fn check(program: &str) -> Result<(), String> {
    const RTF_UP: u32 = 0x0001;
    const RTF_REJECT: u32 = 0x0200;
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|e| format!("{program}: cannot read {path}: {e}"))
    };
    let hex = |s: &str| u32::from_str_radix(s, 16).unwrap_or(0);
    // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
    let v4 = read("/proc/self/net/route")?.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 7
            && hex(f[1]) == 0
            && hex(f[7]) == 0
            && hex(f[3]) & RTF_UP != 0
            && hex(f[3]) & RTF_REJECT == 0
    });
    // Destination PrefixLen Source PrefixLen NextHop Metric RefCnt Use Flags Iface
    let v6 = read("/proc/self/net/ipv6_route")?.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 8 && f[1] == "00" && hex(f[8]) & RTF_UP != 0 && hex(f[8]) & RTF_REJECT == 0
    });
    if v4 || v6 {
        return Err(format!(
            "{program}: refusing to run in a network namespace with a default route ({})",
            if v4 { "IPv4" } else { "IPv6" }
        ));
    }
    if let (Ok(mine), Ok(init)) = (
        std::fs::read_link("/proc/self/ns/net"),
        std::fs::read_link("/proc/1/ns/net"),
    ) {
        if mine == init {
            return Err(format!(
                "{program}: refusing to run in the network namespace of PID 1 ({})",
                mine.display()
            ));
        }
    }
    Ok(())
}
