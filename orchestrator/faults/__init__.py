"""The fault timeline executed. Its actions are one table (orchestrator/model/fault_actions.py); here is
what carries a planned fault out:

    rules.py        which executor method a planned fault calls, given what is running, and the
                    manifest's record of it: decided once, for the live runner (run/) and the simulator (sim/)
    live_run.py     the live run's executor: node processes through the backend; every link action as
                    the next shapes of the links, given whole to the run's shaper
    next_shapes.py  a link action's next shapes (degrade, restore, partition, heal), from the planned
                    shapes and those of now, dilated as the run is: for the live run and the simulator alike

May import: orchestrator.model; orchestrator.shaping, backends and control for types only. Never run/
or sim/, which import this. The package imports nothing itself: the simulator loads rules.py and next_shapes.py, not live_run.py.
"""
