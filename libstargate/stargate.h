/*
 * stargate.h — umbrella header of libstargate, the core of the Stargate
 * toolkit: session-aware routing of LLM inference requests across clusters
 * of inference engines.
 */
#ifndef STARGATE_H
#define STARGATE_H

#include "sg_common.h"
#include "sg_snapshot.h"
#include "sg_request.h"
#include "sg_decision.h"
#include "sg_lbconf.h"
#include "sg_router.h"
#include "sg_metrics.h"
#include "sg_log.h"
#include "sg_fleet.h"
#include "sg_clusterfile.h"
#include "sg_vllm.h"
#include "sg_gateway.h"

#endif /* STARGATE_H */
