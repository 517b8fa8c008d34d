use doorbell_sim::{Profile, Workload};

#[test]
fn smoke() {
    let p = Profile::builtin("connectib-haswell").unwrap().unwrap();
    let w = Workload {
        iters: 200,
        ..Workload::default()
    };
    let r = w.run(&p).unwrap();
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
}
