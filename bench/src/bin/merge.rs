//! `iohr-bench-merge FILE...`: the results of a split run's shares, one
//! `iohr-agent exec --share I/N --json` output per file, merged as the controller merges
//! them when a split run ends (`iohr_domain::load::merge_results`: histograms added,
//! percentiles and thresholds judged again), printed as one JSON result. What
//! bench/split-load.sh measures a split run with, without a controller in the way.

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        bail!("usage: iohr-bench-merge SHARE.json...");
    }
    let mut results = Vec::with_capacity(paths.len());
    for path in &paths {
        let text = std::fs::read_to_string(path).with_context(|| path.clone())?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{path}: not JSON"))?;
        results.push(value["result"].clone());
    }
    let merged = iohr_domain::load::merge_results(&results).context("merging the shares")?;
    println!("{merged}");
    Ok(())
}
