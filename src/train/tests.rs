use super::*;
use apps::StradsTrainApp;
use petrel_strads::apps::logistic::LogisticApp;
use petrel_strads::apps::mf::{MfApp, StradsMfSettings};

#[test]
fn lasso_and_gauss_seidel_logistic_clusters_run_their_transport_on_the_node_threads_and_mf_keeps_its_own()
 {
    let lasso = lasso_settings(&LassoSettings::default(), 2, JobTransport::Processes, false)
        .expect("lasso settings");
    assert_eq!(lasso.net.threads, 0);
    let mf = star_settings_with::<MfApp>(
        &StradsMfSettings::default(),
        &MfApp::scheduler_nodes(&StradsMfSettings::default(), false),
        2,
        JobTransport::Processes,
        60,
    )
    .expect("mf settings");
    assert_eq!(mf.net.threads, petrel_net::NetConfig::default().threads);
    assert!(mf.net.threads > 0);
    // Logistic: on the node's thread with the Gauss-Seidel solver (the default), on a
    // thread of its own with the scheduled one.
    let logistic = |job: &LassoSettings| {
        star_settings_with::<LogisticApp>(
            job,
            &LogisticApp::scheduler_nodes(job, false),
            2,
            JobTransport::Processes,
            60,
        )
        .expect("logistic settings")
        .net
        .threads
    };
    assert_eq!(logistic(&LassoSettings::default()), 0);
    let scheduled = LassoSettings {
        block_size: 8,
        ..LassoSettings::default()
    };
    assert!(logistic(&scheduled) > 0);
    // What a node process reads back keeps the choice.
    let text = toml::to_string(&lasso).expect("toml");
    let read = Settings::from_toml(&text).expect("read back");
    assert_eq!(read.net.threads, 0);
}
