use super::*;

#[test]
fn pipeline_fills_to_depth_then_awaits_in_order() {
    let mut core = PipelineCore::new(2);
    assert_eq!(core.next_action(), PipelineAction::Schedule(0));
    assert_eq!(core.scheduled(&Step::Run(Plan::All(()))), Ok(Some(0)));
    assert_eq!(core.next_action(), PipelineAction::Schedule(1));
    assert_eq!(core.scheduled(&Step::Run(Plan::All(()))), Ok(Some(1)));
    assert_eq!(core.next_action(), PipelineAction::AwaitOldest);
    assert!(core.committed(1).is_err(), "round 1 cannot commit before 0");
    assert_eq!(core.committed(0), Ok(()));
    assert_eq!(core.next_action(), PipelineAction::Schedule(2));
    assert_eq!(core.scheduled::<()>(&Step::Done), Ok(None));
    assert_eq!(core.next_action(), PipelineAction::AwaitOldest);
    assert_eq!(core.committed(1), Ok(()));
    assert_eq!(core.next_action(), PipelineAction::Stop);
}

#[test]
fn wait_needs_a_round_in_flight() {
    let mut core = PipelineCore::new(3);
    assert!(core.scheduled::<()>(&Step::Wait).is_err());
    core.scheduled(&Step::Run(Plan::All(()))).unwrap();
    assert_eq!(core.scheduled::<()>(&Step::Wait), Ok(None));
    assert!(core.must_await(true));
    assert!(!core.must_await(false));
}

#[test]
fn depth_zero_means_one() {
    let mut core = PipelineCore::new(0);
    core.scheduled(&Step::Run(Plan::All(()))).unwrap();
    assert_eq!(core.next_action(), PipelineAction::AwaitOldest);
}

#[test]
fn a_pipeline_can_start_at_a_later_round() {
    let mut core = PipelineCore::starting_at(2, 40);
    assert_eq!(core.next_action(), PipelineAction::Schedule(40));
    assert_eq!(core.scheduled(&Step::Run(Plan::All(()))), Ok(Some(40)));
    assert_eq!(core.in_flight(), 1);
    assert!(core.committed(0).is_err());
    assert_eq!(core.committed(40), Ok(()));
    assert_eq!(core.next_round(), 41);
}
