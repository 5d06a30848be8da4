"""The ROS toolkit: the rclpy-side plumbing the nodes, the CLI and the tests share.

Nothing here holds loop logic (that is ``core/``, which never imports rclpy); node
executables are thin shells in ``nodes/`` over ``core/`` and these modules.

- ``bag_tools``: record and replay rosbag2 bags from rclpy (``BagRecorder``, ``BagPlayer``).
- ``commander``: the operator facade over the graph's services and actions (``Commander``).
- ``dds_isolation``: DDS confined to localhost and a ROS_DOMAIN_ID of its own per run.
- ``executor_backends``: how robot_executor hands a trajectory to a robot (topic, FJT, MoveIt).
- ``fjt_server``: the emulated cell's ``follow_joint_trajectory`` action server.
- ``goal_client``: an action client whose goal futures always finish; error-code names.
- ``params``: parameters with description and range (``declare``, ``Param``, ``bind``).
- ``qos``: the named QoS profiles every publisher and subscriber picks from.
- ``ros_main``: ``run_node``, the one way a node executable starts and stops.
- ``ros_time``: builtin_interfaces Duration/Time conversions and ``NodeDeadline``.
- ``state_listener``: a high-rate subscription on a node and executor of its own.
- ``subscriptions``: subscriptions that exist only while a goal needs them.
- ``topic_listener``: one topic's messages collected in a context of its own (tests, tools).
"""
