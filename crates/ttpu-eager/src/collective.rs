//! Collectives across devices, each run as a program of its own.
//!
//! A collective joins values of several devices: one replica per device of a program whose one
//! op is the collective (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`,
//! `collective_permute`), so the data moves device to device, never through the host. The
//! devices may belong to several processes (a runtime of a multi-process job): each process
//! passes the operands of its own devices, and the plugin joins them. The work pending on each
//! operand's device runs first, so a program never waits inside on another device's tape: this
//! is the "split around collectives" discipline, under which ranks that record the same work
//! flush at the same points.
//!
//! A collective may instead be recorded into the pending program (`collective_in_program`), which
//! then runs as one replica of several: the whole step, its collectives included, is one
//! program, as XLA fuses them. Every rank must then record the same program and run it at the
//! same point (the SPMD discipline of the caller); a collective over other replicas runs the
//! pending program first.

use ttpu_ir::{Collective, GraphBuilder};
use ttpu_runtime::CompileSpec;

use crate::mesh::Stored;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Records `collective` on this tensor into its device's pending program, which then runs as
    /// the replica of this device among `devices` (runtime device indices in replica order; no
    /// other device of this process may be among them). The program runs when its values are
    /// needed, with the rest of the pending work.
    pub fn collective_in_program(&self, collective: &Collective, devices: &[usize]) -> Result<Tensor> {
        self.node.device.record_collective(self, collective.clone(), devices)
    }

    /// Runs `collective` over the replicas `devices` (runtime device indices, in replica order,
    /// as the collective's replica groups and pairs number them). `operands` are this process's
    /// members, one per device it runs among `devices`, in that order; all of one type, each a
    /// plain value on its own device. Returns one result per operand, on the operand's device.
    pub fn collective(operands: &[&Tensor], collective: &Collective, devices: &[usize]) -> Result<Vec<Tensor>> {
        let mismatch = |message: String| Error::CallOperands { message };
        let Some(first) = operands.first() else {
            return Err(mismatch("a collective needs at least one operand".into()));
        };
        collective
            .check_replicas(devices.len())
            .map_err(|message| mismatch(format!("`{}`: {message}", collective.mnemonic())))?;
        let ty = (*first.node.ty).clone();
        for operand in operands {
            if *operand.node.ty != ty {
                return Err(mismatch(format!("collective operands of types {ty} and {}", operand.node.ty)));
            }
        }
        let mut builder = GraphBuilder::new();
        let input = builder.input(ty, Some("operand".into()));
        let output = builder.collective(collective.clone(), input)?;
        let graph = builder.finish(&[output]);
        let runtime = first.node.device.runtime().clone();
        let spec = CompileSpec { devices: devices.to_vec(), ..CompileSpec::default() };
        let executable = runtime.graph_executable(&graph, &spec)?;
        let local: Vec<usize> = operands.iter().map(|operand| operand.node.device.index()).collect();
        if executable.local_devices() != local.as_slice() {
            return Err(mismatch(format!(
                "operands on devices {local:?}, but this process runs devices {:?} of the collective's {devices:?}",
                executable.local_devices()
            )));
        }
        let stored = operands
            .iter()
            .map(|operand| {
                let stored = operand.node.device.buffer(operand)?;
                if stored.buffers.len() != 1 {
                    return Err(Error::Mesh {
                        message: "a collective across devices takes values of one device each, not mesh values".into(),
                    });
                }
                Ok(stored)
            })
            .collect::<Result<Vec<_>>>()?;
        let args: Vec<[&ttpu_runtime::Buffer; 1]> = stored.iter().map(|stored| [stored.first()]).collect();
        let lists: Vec<&[&ttpu_runtime::Buffer]> = args.iter().map(|list| list.as_slice()).collect();
        let results = executable.run_replicated(&lists)?;
        let result_ty = graph.ty(output).clone();
        results
            .into_iter()
            .zip(operands)
            .map(|(mut buffers, operand)| {
                let buffer = buffers.pop().ok_or_else(|| Error::internal("a collective program returned nothing"))?;
                Tensor::ready_stored(&operand.node.device, result_ty.clone(), Stored::single(buffer))
            })
            .collect()
    }
}
