//! Stamps the versions the binary was built with (libp2p and libp2p-gossipsub as Cargo.lock pins them,
//! and the compiler) for `rust-libp2p-node --version`.
use std::process::Command;

fn locked(lock: &str, name: &str) -> String {
    let needle = format!("name = \"{name}\"\nversion = \"");
    lock.find(&needle).and_then(|at| lock[at + needle.len()..].split('"').next()).unwrap_or("?").to_string()
}

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=PEERLAB_LIBP2P_VERSION={}", locked(&lock, "libp2p"));
    println!("cargo:rustc-env=PEERLAB_GOSSIPSUB_VERSION={}", locked(&lock, "libp2p-gossipsub"));
    println!("cargo:rustc-env=PEERLAB_RUSTC_VERSION={version}");
}
