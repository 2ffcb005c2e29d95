//! Collectives across 4 CPU devices of one runtime: as programs of their own (`collective`),
//! each device's operand in, each device's result out, computed on the devices; and recorded into
//! a device's pending program (`collective_in_program`), which then runs as one replica.

use ttpu_eager::{Device, Runtime, Tensor};
use ttpu_ir::{Collective, ReduceKind};
use ttpu_runtime::RuntimeOptions;

fn four_devices() -> Vec<Device> {
    let plugin = Runtime::cpu().unwrap_or_else(|error| panic!("{error}")).plugin_path().to_path_buf();
    let runtime = Runtime::new(&plugin, &RuntimeOptions { devices: Some(4), ..RuntimeOptions::default() })
        .unwrap_or_else(|error| panic!("{error}"));
    (0..4).map(|index| Device::on(&runtime, index).expect("a device")).collect()
}

#[test]
fn a_collective_program_joins_the_devices_values() {
    let devices = four_devices();
    // Pending work on every device: the collective runs it first.
    let operands: Vec<Tensor> = devices
        .iter()
        .enumerate()
        .map(|(index, device)| {
            Tensor::from_slice(device, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap().mul_scalar(index as f32 + 1.0).unwrap()
        })
        .collect();
    let refs: Vec<&Tensor> = operands.iter().collect();
    let halves = vec![vec![0, 1], vec![2, 3]];
    let sums = Tensor::collective(
        &refs,
        &Collective::AllReduce { kind: ReduceKind::Sum, groups: halves.clone() },
        &[0, 1, 2, 3],
    )
    .unwrap();
    let values: Vec<Vec<f32>> = sums.iter().map(|sum| sum.to_vec::<f32>().unwrap()).collect();
    assert_eq!(values[0], [3.0, 6.0, 9.0, 12.0]);
    assert_eq!(values[3], [7.0, 14.0, 21.0, 28.0]);
    assert!(sums.iter().zip(&devices).all(|(sum, device)| sum.device().index() == device.index()));
    let gathered = Tensor::collective(
        &refs,
        &Collective::AllGather { dimension: 0, groups: vec![vec![0, 1, 2, 3]] },
        &[0, 1, 2, 3],
    )
    .unwrap();
    assert_eq!(gathered[2].dims(), [16]);
    assert_eq!(&gathered[2].to_vec::<f32>().unwrap()[12..], [4.0, 8.0, 12.0, 16.0]);
    // Groups and pairs that do not fit the replicas are refused before XLA sees them.
    let wide = Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![vec![0, 5]] };
    assert_eq!(
        Tensor::collective(&refs[..2], &wide, &[0, 1]).unwrap_err().to_string(),
        "call: `all_reduce`: replica 5 of the groups is outside 0..2"
    );
    let part = Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![vec![0, 1]] };
    assert_eq!(
        Tensor::collective(&refs, &part, &[0, 1, 2, 3]).unwrap_err().to_string(),
        "call: `all_reduce`: the groups [[0, 1]] name 2 replicas of 4"
    );
    let far = Collective::CollectivePermute { pairs: vec![(0, 9)] };
    assert_eq!(
        Tensor::collective(&refs[..2], &far, &[0, 1]).unwrap_err().to_string(),
        "call: `collective_permute`: pair (0, 9) names a replica outside 0..2"
    );
    // Operands that do not match the replicas are refused by name.
    let error =
        Tensor::collective(&refs[..2], &Collective::AllReduce { kind: ReduceKind::Sum, groups: halves }, &[0, 1, 2, 3])
            .unwrap_err();
    assert_eq!(
        error.to_string(),
        "call: operands on devices [0, 1], but this process runs devices [0, 1, 2, 3] of the collective's [0, 1, 2, 3]"
    );
}

#[test]
fn a_collective_recorded_into_a_program_runs_with_it() {
    let devices = four_devices();
    let x = Tensor::from_slice(&devices[2], &[1.5f32, -2.0], &[2]).unwrap();
    let one = Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![vec![0]] };
    // One replica (this device): the step and its collective are one program.
    let y = x.mul_scalar(2.0f32).unwrap().collective_in_program(&one, &[2]).unwrap().add_scalar(1.0f32).unwrap();
    assert!(y.is_pending());
    assert_eq!(y.to_vec::<f32>().unwrap(), [4.0, -3.0]);
    // Groups over more replicas than the program has are refused when recorded, not at its run.
    let error =
        x.collective_in_program(&Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![vec![0, 1]] }, &[2]);
    assert_eq!(error.unwrap_err().to_string(), "call: `all_reduce`: replica 1 of the groups is outside 0..1");
    // A program runs as this process's one replica; another device of the process cannot join it.
    let two = Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![vec![0, 1]] };
    let error = x.collective_in_program(&two, &[2, 3]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "call: a collective recorded into device 2's program needs that device, and no other device of this process, \
         among its replicas [2, 3]"
    );
}
