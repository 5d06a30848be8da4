"""Grasping (ROS-free): the parallel-jaw gripper a robot description carries, its jaw in a
MuJoCo model (:mod:`.jaw`) and the hold test (:mod:`.hold`)."""
