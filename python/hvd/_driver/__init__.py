"""What hvd.spark and hvd.ray share (Horovod keeps it in horovod.spark and
horovod.ray separately): the rendezvous store their driver serves (store),
one rank's run on an executor or actor (worker), the elastic agents and
hvdrun's ssh stand-in for them (agent, agent_ssh), the elastic driver over
the agents (elastic) and the worker process it starts (elastic_worker).
Not an API: hvd.spark and hvd.ray are."""
