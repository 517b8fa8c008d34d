//! ibv_rc_pingpong, in safe Rust, between two doorbell NICs in one process.
//!
//! The two sides are [`doorbell_cli::pingpong::Endpoint`]s, the very code
//! `doorbell pingpong` runs between processes and hosts: one buffer, one CQ
//! and one RC QP per side, connected with rdma-core's attributes (path MTU,
//! PSNs, timeout 14, retry 7, RNR 7, min RNR timer 12), `rx_depth`
//! receives kept posted, `iters` SENDs of `size` bytes bounced, inline when
//! the QP allows. Here the NICs share an in-process fabric and the
//! "exchange" is a function call; the summary lines are the same.
//!
//! ```text
//! cargo run --release --example rc_pingpong -- [size] [iters] [rx_depth] [mtu]
//! ```

use std::sync::Arc;
use std::thread;

use doorbell_cli::pingpong::{Endpoint, Settings, summary};
use doorbell_rt::{Fabric, LiveNic};
use doorbell_types::Psn;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let d = Settings::default();
    let s = Settings {
        size: args.first().copied().unwrap_or(d.size),
        iters: args.get(1).copied().unwrap_or(d.iters).max(1),
        rx_depth: args.get(2).copied().unwrap_or(d.rx_depth).max(1),
        mtu: args.get(3).copied().unwrap_or(d.mtu),
        ..d
    };
    let fabric = Fabric::new();
    let nic = |name, ip| LiveNic::start(name, &fabric, ip, Default::default()).map(Arc::new);
    let mut server = Endpoint::new(nic("doorbell0", [127, 0, 0, 2])?, s, Psn::new(0x12_3456))?;
    let mut client = Endpoint::new(nic("doorbell1", [127, 0, 0, 3])?, s, Psn::new(0xab_cdef))?;
    // The out-of-band exchange, in process.
    let (es, ec) = (server.local(), client.local());
    println!("  local address:  {ec}");
    println!("  remote address: {es}");
    server.connect(&ec)?;
    client.connect(&es)?;
    // No progress bar: the example's output is its summary alone.
    let srv = thread::spawn(move || {
        let quiet = doorbell_cli::progress::Bar::new(0, "", true);
        server.run(false, &quiet).map_err(|e| e.to_string())
    });
    let out = client.run(true, &doorbell_cli::progress::Bar::new(0, "", true))?;
    srv.join().map_err(|_| "server thread panicked")??;
    println!("{}", summary(s.size, s.iters, out.secs));
    Ok(())
}
