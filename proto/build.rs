//! Compiles the protocol with protox (no `protoc` on the build machines) and tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/agent_link.proto", "proto/runs.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        // An offer carries account secrets: its `Debug` is written by hand (src/lib.rs)
        // so that no log line can print them.
        .skip_debug(["iohr.link.v1.LeaseOffer"])
        .compile_fds(descriptors)?;
    Ok(())
}
