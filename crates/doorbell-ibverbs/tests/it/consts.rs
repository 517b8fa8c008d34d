//! The C enum and flag values of `ibverbs::abi::consts` against the
//! installed `<infiniband/verbs.h>`: a C probe prints each by its name.

use ibverbs::abi::consts::ALL;

#[test]
fn every_constant_has_the_headers_value() {
    let mut probe = crate::c_probe::probe();
    for (name, _) in ALL {
        // Through long long, so that negative enum values survive.
        probe.num(name, &format!("(long long)({name})"));
    }
    let printed = probe.run("consts");
    let wrong: Vec<String> = ALL
        .iter()
        .filter(|&&(name, v)| printed.num(name) as i64 != v)
        .map(|&(name, v)| format!("{name}: ours {v}, header {}", printed.num(name) as i64))
        .collect();
    assert!(
        wrong.is_empty(),
        "constants differ from {}:\n{}",
        printed.source().display(),
        wrong.join("\n")
    );
}
